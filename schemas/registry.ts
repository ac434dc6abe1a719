import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import avro from 'avsc';

/** Subjects with a schema in the manifest. */
export type Subject =
  | 'player-event'
  | 'tenant'
  | 'api-key'
  | 'api-key-usage'
  | 'video'
  | 'destination'
  | 'delivery'
  | 'webhook-attempt'
  | 'security-event'
  | 'visitor-copies';

interface ManifestEntry {
  id: number;
  subject: Subject;
  version: number;
  file: string;
  writer?: boolean;
}

interface LoadedSchema extends ManifestEntry {
  type: avro.Type;
  schema: avro.Schema;
}

const here = dirname(fileURLToPath(import.meta.url));
const MAGIC = 0;

/** Thrown for bytes that are not a record this registry can read. */
export class SchemaDecodeError extends Error {
  override name = 'SchemaDecodeError';
}

/**
 * Reads the schema manifest and encodes/decodes records in the Confluent wire
 * format: magic byte 0, the 4-byte big-endian schema id, then Avro binary.
 * The ids come from schemas/manifest.json, so a schema registry can take over
 * later without changing a byte on the wire.
 */
export class SchemaRegistry {
  readonly #byId = new Map<number, LoadedSchema>();
  readonly #writer = new Map<Subject, LoadedSchema>();
  readonly #latest = new Map<Subject, LoadedSchema>();
  /** Resolvers of `decode`, by writer id (the reader is its subject's newest schema). */
  readonly #resolvers = new Map<number, avro.Resolver>();
  /** Where `encodeAll` encodes before copying out; grows as needed. */
  #scratch = Buffer.allocUnsafe(64 * 1024);

  constructor(entries: ManifestEntry[], baseDir: string) {
    for (const entry of entries) {
      const schema = JSON.parse(readFileSync(join(baseDir, entry.file), 'utf8')) as avro.Schema;
      const loaded = { ...entry, type: avro.Type.forSchema(schema), schema };
      if (this.#byId.has(entry.id)) throw new Error(`schema id ${entry.id} is used twice`);
      this.#byId.set(entry.id, loaded);
      if (entry.writer) this.#writer.set(entry.subject, loaded);
      const latest = this.#latest.get(entry.subject);
      if (!latest || latest.version < entry.version) this.#latest.set(entry.subject, loaded);
    }
  }

  /** The registry described by schemas/manifest.json. */
  static fromManifest(path = join(here, 'manifest.json')): SchemaRegistry {
    const manifest = JSON.parse(readFileSync(path, 'utf8')) as { schemas: ManifestEntry[] };
    return new SchemaRegistry(manifest.schemas, dirname(path));
  }

  /** Schema id producers write for `subject` today. */
  writerId(subject: Subject): number {
    return this.#writerOf(subject).id;
  }

  /** Encodes `value` with the current writer schema of `subject` (or the schema `id`). */
  encode(subject: Subject, value: unknown, id?: number): Buffer {
    const schema = id === undefined ? this.#writerOf(subject) : this.#byId.get(id);
    if (!schema || schema.subject !== subject) throw new Error(`no schema ${id} for ${subject}`);
    const body = schema.type.toBuffer(value);
    const out = Buffer.allocUnsafe(5 + body.length);
    out.writeUInt8(MAGIC, 0);
    out.writeUInt32BE(schema.id, 1);
    body.copy(out, 5);
    return out;
  }

  /**
   * Encodes every value with the current writer schema of `subject`, as
   * `encode` does each, into one buffer: the results are views of it. NOTE:
   * for the intake's hot path, where a request's records are encoded
   * together. One allocation and one copy for all of them, against two of
   * each per record (avsc's toBuffer, then the framed copy).
   */
  encodeAll(subject: Subject, values: readonly unknown[]): Buffer[] {
    const schema = this.#writerOf(subject);
    let scratch = this.#scratch;
    const ends: number[] = new Array<number>(values.length);
    let pos = 0;
    for (let i = 0; i < values.length; i++) {
      for (;;) {
        if (scratch.length - pos >= 5) {
          scratch[pos] = MAGIC;
          scratch.writeUInt32BE(schema.id, pos + 1);
          const end = schema.type.encode(values[i], scratch, pos + 5);
          if (end >= 0) {
            pos = end;
            break;
          }
        }
        // Too small: avsc answers how many bytes were missing; double at least.
        const grown = Buffer.allocUnsafe(Math.max(scratch.length * 2, pos + 5 + 4096));
        scratch.copy(grown, 0, 0, pos);
        scratch = this.#scratch = grown;
      }
      ends[i] = pos;
    }
    const all = Buffer.allocUnsafe(pos);
    scratch.copy(all, 0, 0, pos);
    const out: Buffer[] = new Array<Buffer>(values.length);
    for (let i = 0, start = 0; i < values.length; start = ends[i]!, i++) out[i] = all.subarray(start, ends[i]);
    return out;
  }

  /**
   * Decodes a record written with any known schema of `subject` into the
   * newest reader schema of that subject (Avro schema resolution fills in
   * defaults for fields an older writer did not have).
   */
  decode<T>(subject: Subject, bytes: Buffer): T {
    const writer = this.#writerFor(subject, bytes);
    const reader = this.#latest.get(subject)!;
    const body = bytes.subarray(5);
    if (reader.id === writer.id) return reader.type.fromBuffer(body) as T;
    return reader.type.fromBuffer(body, resolverOf(this.#resolvers, reader.type, writer), true) as T;
  }

  /**
   * A decoder of a few top-level fields of `subject`'s records, as `decode`
   * would answer them (same reader schema, same defaults for older writers,
   * the same errors for bytes it cannot read), without building the others:
   * Avro's resolution skips them. NOTE: for a consumer that only routes
   * records (e.g. by a key made of two ids), where a whole decoding per
   * record would be most of its work.
   */
  fieldsDecoder<T>(subject: Subject, fields: readonly string[]): (bytes: Buffer) => T {
    const reader = this.#latest.get(subject);
    if (!reader) throw new Error(`no schema for ${subject}`);
    const whole = reader.schema as avro.schema.RecordType;
    const kept = whole.fields.filter((f) => fields.includes(f.name));
    if (kept.length !== fields.length) throw new Error(`${subject} has no field ${fields.filter((n) => !kept.some((f) => f.name === n)).join(', ')}`);
    const narrow = avro.Type.forSchema({ ...whole, fields: kept });
    const resolvers = new Map<number, avro.Resolver>();
    return (bytes) => {
      const writer = this.#writerFor(subject, bytes);
      // The same check of trailing bytes as decode's: only for the reader's own writer.
      return narrow.fromBuffer(bytes.subarray(5), resolverOf(resolvers, narrow, writer), writer.id !== reader.id) as T;
    };
  }

  #writerFor(subject: Subject, bytes: Buffer): LoadedSchema {
    if (bytes.length < 5 || bytes.readUInt8(0) !== MAGIC) {
      throw new SchemaDecodeError('not in the Confluent wire format (magic byte 0)');
    }
    const id = bytes.readUInt32BE(1);
    const writer = this.#byId.get(id);
    if (!writer) throw new SchemaDecodeError(`unknown schema id ${id}`);
    if (writer.subject !== subject) {
      throw new SchemaDecodeError(`schema id ${id} is ${writer.subject}, expected ${subject}`);
    }
    return writer;
  }

  #writerOf(subject: Subject): LoadedSchema {
    const schema = this.#writer.get(subject);
    if (!schema) throw new Error(`no writer schema for ${subject}`);
    return schema;
  }
}

/** The resolver from `writer` to `reader`, made once per writer and kept in `cache`. */
function resolverOf(cache: Map<number, avro.Resolver>, reader: avro.Type, writer: LoadedSchema): avro.Resolver {
  let resolver = cache.get(writer.id);
  if (!resolver) cache.set(writer.id, (resolver = reader.createResolver(writer.type)));
  return resolver;
}
