/**
 * A real single-node Apache Kafka broker (KRaft, broker + controller in one
 * JVM) assembled from Maven Central jars, for machines without a container
 * runtime. See infra/kafka/README.md.
 *
 * Version choice (checked against Maven Central's kafka_2.13 listing):
 * - 4.4.0 is the newest version listed, but it cannot be resolved: its POM
 *   depends on org.apache.kafka:kafka-tools-api:4.4.0, which is not on Central
 *   (HTTP 404, and kafka-tools-api's maven-metadata.xml stops at 4.3.1). Mixing
 *   in a 4.3.1 tools jar would give a broker that no release ever shipped.
 * - 4.3.1 is therefore the newest usable release. kafkajs 2.2.4 negotiates API
 *   versions that Kafka 4.x still serves (KIP-896 removed only very old ones;
 *   JoinGroup v0/v1 came back in 4.0.1/4.1.0), and local-broker.test.ts proves
 *   it end to end: topic admin incl. compaction, acks=-1 produce, idempotent
 *   produce, consumer groups with eachBatch, pause/resume, seek, manual
 *   commits, offset and lag queries, clean restart and crash (SIGKILL) restart.
 *   No step back to 4.0.x or 3.9.x was needed.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, open, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { type Admin, Kafka, logLevel } from 'kafkajs';

/** The Apache Kafka release run by {@link startLocalBroker}; jars come from Maven Central. */
export const KAFKA_VERSION = '4.3.1';

/** A running local broker started by {@link startLocalBroker}. */
export type LocalBroker = {
  /** Bootstrap list for kafkajs, e.g. `['127.0.0.1:40123']`. */
  brokers: string[];
  /** Port of the PLAINTEXT client listener on 127.0.0.1. */
  port: number;
  /** Process id of the broker JVM. */
  pid: number;
  /** Absolute data directory: KRaft log dirs, `server.properties` and `logs/`. */
  dataDir: string;
  /** The broker's log file, useful when a test needs to explain a failure. */
  logFile: string;
  /** Controlled shutdown: SIGTERM, then SIGKILL if the JVM has not exited after 20 s. */
  stop(): Promise<void>;
  /** Immediate SIGKILL, to simulate a crash; does not wait for the process to exit. */
  kill(): void;
};

/** Options for {@link startLocalBroker}. */
export type StartLocalBrokerOptions = {
  /** Where the broker keeps its data; reuse it to restart with the same topics and offsets. */
  dataDir: string;
  /** Default partition count for topics created without one (`num.partitions`), 12 unless given. */
  partitions?: number;
  /** Progress messages (download, start-up, fallbacks). */
  log?: (msg: string) => void;
  /** Maximum JVM heap in MiB, 1024 unless given. */
  heapMb?: number;
};

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO_ROOT = path.resolve(HERE, '..', '..');
const POM = path.join(HERE, 'pom.xml');
const LOG4J2_CONFIG = path.join(HERE, 'log4j2.properties');
const COMPLETE_MARKER = '.complete';
const READY_TIMEOUT_MS = 60_000;
const STOP_GRACE_MS = 20_000;
const MAVEN_TIMEOUT_MS = 20 * 60_000;
const BIND_ATTEMPTS = 3;

const noop = (): void => {};

/**
 * Downloads the broker's jars (and the log4j2 backend) with Maven into a
 * per-version cache, once per machine. Safe to call from several processes at
 * once: one downloads under a lock file into a temporary directory that is
 * renamed into place, the others wait for it.
 *
 * @returns the directory holding the jars, for `java -cp '<dir>/*'`.
 */
export async function ensureKafkaJars(opts: { cacheDir?: string; log?: (msg: string) => void } = {}): Promise<string> {
  const log = opts.log ?? noop;
  const cacheDir = path.resolve(opts.cacheDir ?? process.env.KAFKA_CACHE_DIR ?? path.join(REPO_ROOT, '.cache', 'kafka'));
  const versionDir = path.join(cacheDir, `kafka-${KAFKA_VERSION}`);
  const libsDir = path.join(versionDir, 'libs');
  if (existsSync(path.join(libsDir, COMPLETE_MARKER))) return libsDir;

  await mkdir(versionDir, { recursive: true });
  const unlock = await acquireLock(path.join(versionDir, '.download.lock'), log);
  try {
    if (existsSync(path.join(libsDir, COMPLETE_MARKER))) return libsDir;
    const partial = await mkdtemp(path.join(versionDir, '.libs-partial-'));
    try {
      log(`downloading Apache Kafka ${KAFKA_VERSION} jars from Maven Central into ${libsDir} (first run only, about a minute)`);
      const startedAt = performance.now();
      await runMaven(partial);
      const jars = (await readdir(partial)).filter((name) => name.endsWith('.jar')).sort();
      if (!jars.includes(`kafka_2.13-${KAFKA_VERSION}.jar`) || !jars.some((name) => name.startsWith('log4j-core-'))) {
        throw new Error(`Maven finished but ${partial} lacks the Kafka or log4j jars: ${jars.join(', ')}`);
      }
      await writeFile(path.join(partial, COMPLETE_MARKER), `${jars.join('\n')}\n`);
      // A directory without the marker is a leftover of an interrupted run; a
      // complete one may already be in use by a running broker, so keep it.
      if (!existsSync(path.join(libsDir, COMPLETE_MARKER))) {
        await rm(libsDir, { recursive: true, force: true });
        await rename(partial, libsDir);
      }
      log(`downloaded ${jars.length} jars in ${((performance.now() - startedAt) / 1000).toFixed(1)} s`);
    } finally {
      await rm(partial, { recursive: true, force: true });
    }
  } finally {
    await unlock();
  }
  return libsDir;
}

async function runMaven(outputDir: string): Promise<void> {
  const args = [
    '-q',
    '-B',
    '-f',
    POM,
    `-Dkafka.version=${KAFKA_VERSION}`,
    'dependency:copy-dependencies',
    '-DincludeScope=runtime',
    `-DoutputDirectory=${outputDir}`,
  ];
  await new Promise<void>((resolve, reject) => {
    const child = spawn('mvn', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (chunk: Buffer) => (text += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (text += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), MAVEN_TIMEOUT_MS);
    child.on('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      reject(
        err.code === 'ENOENT'
          ? new Error('Maven (mvn) is not on PATH; it is needed once to fetch the Kafka broker jars from Maven Central')
          : err,
      );
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new Error(`mvn ${args.join(' ')} failed (${signal ?? `exit ${code}`}):\n${tail(text, 40)}`));
    });
  });
}

async function acquireLock(lockPath: string, log: (msg: string) => void): Promise<() => Promise<void>> {
  const deadline = Date.now() + MAVEN_TIMEOUT_MS;
  let announced = false;
  for (;;) {
    try {
      const handle = await open(lockPath, 'wx');
      await handle.writeFile(JSON.stringify({ pid: process.pid, host: os.hostname(), at: new Date().toISOString() }));
      await handle.close();
      return async () => {
        await rm(lockPath, { force: true });
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    if (await isStaleLock(lockPath)) {
      await rm(lockPath, { force: true });
      continue;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${lockPath}; delete it if no download is running`);
    if (!announced) {
      log(`waiting for another process that is downloading the Kafka ${KAFKA_VERSION} jars (${lockPath})`);
      announced = true;
    }
    await sleep(500);
  }
}

async function isStaleLock(lockPath: string): Promise<boolean> {
  try {
    const [text, info] = await Promise.all([readFile(lockPath, 'utf8'), stat(lockPath)]);
    const ageMs = Date.now() - info.mtimeMs;
    if (ageMs > MAVEN_TIMEOUT_MS) return true;
    let owner: { pid?: number; host?: string } = {};
    try {
      owner = JSON.parse(text) as typeof owner;
    } catch {
      // The owner may be between creating and writing the file; only an old
      // unreadable lock is abandoned.
      return ageMs > 30_000;
    }
    return owner.host === os.hostname() && typeof owner.pid === 'number' && !isAlive(owner.pid);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

type BrokerState = { port: number; controllerPort: number; pid?: number };

/**
 * Starts a broker on free 127.0.0.1 ports and resolves once a kafkajs admin
 * can fetch cluster metadata. Calling it again on the same `dataDir` after
 * {@link LocalBroker.stop} or {@link LocalBroker.kill} restarts the same
 * cluster with its topics, data and committed offsets, on the same port when
 * that port is still free (so clients configured with the old address
 * reconnect), otherwise on new ports.
 *
 * The JVM does not keep the Node process alive; it receives SIGTERM when the
 * Node process exits, and on Linux also when the Node process dies abruptly.
 */
export async function startLocalBroker(opts: StartLocalBrokerOptions): Promise<LocalBroker> {
  const log = opts.log ?? noop;
  const dataDir = path.resolve(opts.dataDir);
  const logsDir = path.join(dataDir, 'logs');
  const kraftDir = path.join(dataDir, 'kafka');
  const propsPath = path.join(dataDir, 'server.properties');
  const statePath = path.join(dataDir, 'local-broker.json');
  const logFile = path.join(logsDir, 'server.log');
  const stdoutFile = path.join(logsDir, 'broker-stdout.log');

  const libsDir = await ensureKafkaJars({ log });
  const java = findJava();
  await mkdir(logsDir, { recursive: true });

  await waitForBrokerStartedHere(dataDir);
  const previous = await readState(statePath);
  if (previous?.pid !== undefined) await waitForPreviousBroker(previous.pid, propsPath);

  const formatted = (await readClusterId(kraftDir)) !== undefined;
  const settings = { dataDir, kraftDir, partitions: opts.partitions ?? 12 };
  let ports = await choosePorts(previous);
  await writeServerProperties(propsPath, { ...settings, ...ports });
  // The storage tool writes meta.properties last, so its presence means a
  // finished format; `--ignore-formatted` would make a second run a no-op, but
  // skipping it saves a JVM start (about a second) on every restart.
  if (!formatted) await formatStorage(java, libsDir, propsPath, newClusterId());

  for (let attempt = 1; ; attempt++) {
    const startedAt = performance.now();
    try {
      const broker = await launch({
        java,
        libsDir,
        propsPath,
        logsDir,
        logFile,
        stdoutFile,
        dataDir,
        heapMb: opts.heapMb ?? 1024,
        port: ports.port,
      });
      await writeState(statePath, { ...ports, pid: broker.pid });
      log(
        `local Kafka ${KAFKA_VERSION} broker ready at ${broker.brokers[0]} in ${((performance.now() - startedAt) / 1000).toFixed(1)} s (pid ${broker.pid}, data ${dataDir})`,
      );
      return broker;
    } catch (err) {
      if (!(err instanceof PortInUseError) || attempt >= BIND_ATTEMPTS) throw err;
      // Another process took a port between our probe and the JVM's bind.
      log(`port taken while the broker started, retrying on new ports: ${err.message.split('\n')[0]}`);
      ports = await choosePorts(undefined);
      await writeServerProperties(propsPath, { ...settings, ...ports });
    }
  }
}

/** One node of a {@link LocalCluster}. */
export type LocalClusterNode = {
  /** KRaft node id: 1, 2, 3, … (the ids that partition metadata lists as leader and replicas). */
  nodeId: number;
  /** PLAINTEXT client port on 127.0.0.1; kept across restarts. */
  port: number;
  /** CONTROLLER port on 127.0.0.1; part of every node's static voter list. */
  controllerPort: number;
  /** Process id of the current JVM, undefined while the node is down. */
  pid: number | undefined;
  running: boolean;
  /** `<dataDir>/node-<id>`. */
  dataDir: string;
  logFile: string;
};

/** A running multi-node cluster started by {@link startLocalCluster}. */
export type LocalCluster = {
  /** Every node's client address, for kafkajs' bootstrap list (clients skip nodes that are down). */
  brokers: string[];
  size: number;
  clusterId: string;
  dataDir: string;
  /** Current state of each node, in node-id order. */
  nodes(): LocalClusterNode[];
  node(nodeId: number): LocalClusterNode;
  /** SIGKILL (a crash, `kill -9`) of one node; resolves once the JVM is gone. */
  kill(nodeId: number): Promise<void>;
  /** SIGTERM with controlled shutdown of one node; SIGKILL after 20 s. */
  stopNode(nodeId: number): Promise<void>;
  /**
   * Starts a node that was killed or stopped, on its old ports and data, and
   * resolves once it is registered and unfenced (listed in metadata). It then
   * catches up and rejoins the ISRs on its own; tests wait for that.
   */
  restart(nodeId: number): Promise<void>;
  /** Controlled shutdown of every node that is running. */
  stop(): Promise<void>;
};

/** Options for {@link startLocalCluster}. */
export type StartLocalClusterOptions = {
  /** Holds `node-<id>/` per node and `local-cluster.json`; reuse it to restart the same cluster. */
  dataDir: string;
  /** Number of nodes, each broker and controller (combined mode); 3 unless given. */
  nodes?: number;
  /** Default partition count (`num.partitions`), 12 unless given. */
  partitions?: number;
  /** Maximum JVM heap of each node in MiB, 512 unless given. */
  heapMb?: number;
  log?: (msg: string) => void;
};

type ClusterState = { clusterId: string; nodes: { nodeId: number; port: number; controllerPort: number; pid?: number }[] };

const CLUSTER_READY_TIMEOUT_MS = 120_000;

/**
 * Starts a KRaft cluster of `nodes` JVMs on 127.0.0.1, each broker and
 * controller, with a static voter set of all nodes (so any majority elects a
 * controller and keeps the metadata log). With three nodes or more, internal
 * topics (consumer offsets, transaction state) and the broker defaults use 3
 * replicas and `min.insync.replicas` 2, so acks=-1 producers, transactions and
 * offset commits go on while one node is down.
 *
 * Resolves once every node answers metadata, is registered and unfenced, and
 * every existing partition has a leader. Calling it again on the same
 * `dataDir` after {@link LocalCluster.stop} restarts the same cluster (ports
 * kept if they are all still free). Like {@link startLocalBroker}, the JVMs
 * get SIGTERM when the Node process exits or dies.
 */
export async function startLocalCluster(opts: StartLocalClusterOptions): Promise<LocalCluster> {
  const log = opts.log ?? noop;
  const size = opts.nodes ?? 3;
  if (!Number.isInteger(size) || size < 1) throw new Error(`a cluster needs at least one node, got ${size}`);
  const dataDir = path.resolve(opts.dataDir);
  const statePath = path.join(dataDir, 'local-cluster.json');
  const partitions = opts.partitions ?? 12;
  const heapMb = opts.heapMb ?? 512;
  const nodeIds = Array.from({ length: size }, (_, i) => i + 1);
  const layout = new Map(
    nodeIds.map((nodeId) => {
      const dir = path.join(dataDir, `node-${nodeId}`);
      const logsDir = path.join(dir, 'logs');
      return [
        nodeId,
        {
          dir,
          logsDir,
          kraftDir: path.join(dir, 'kafka'),
          propsPath: path.join(dir, 'server.properties'),
          logFile: path.join(logsDir, 'server.log'),
          stdoutFile: path.join(logsDir, 'broker-stdout.log'),
        },
      ] as const;
    }),
  );
  const paths = (nodeId: number) => {
    const p = layout.get(nodeId);
    if (!p) throw new Error(`no node ${nodeId} in this ${size}-node cluster (node ids are 1..${size})`);
    return p;
  };

  const libsDir = await ensureKafkaJars({ log });
  const java = findJava();
  const previous = await readClusterState(statePath);
  if (previous && previous.nodes.length !== size) {
    throw new Error(`${dataDir} holds a ${previous.nodes.length}-node cluster, not ${size} nodes; use another data directory`);
  }
  for (const nodeId of nodeIds) {
    const p = paths(nodeId);
    await mkdir(p.logsDir, { recursive: true });
    await waitForBrokerStartedHere(p.dir);
    const pid = previous?.nodes.find((n) => n.nodeId === nodeId)?.pid;
    if (pid !== undefined) await waitForPreviousBroker(pid, p.propsPath);
  }

  const clusterId = previous?.clusterId ?? (await readClusterId(paths(1).kraftDir)) ?? newClusterId();
  let ports = await choosePortSet(nodeIds, previous);
  const writeAll = () =>
    Promise.all(
      nodeIds.map((nodeId) => {
        const p = paths(nodeId);
        const own = ports.get(nodeId)!;
        return writeServerProperties(p.propsPath, {
          dataDir: p.dir,
          kraftDir: p.kraftDir,
          partitions,
          nodeId,
          port: own.port,
          controllerPort: own.controllerPort,
          voters: nodeIds.map((id) => ({ nodeId: id, controllerPort: ports.get(id)!.controllerPort })),
        });
      }),
    );
  await writeAll();
  await Promise.all(
    nodeIds.map(async (nodeId) => {
      const p = paths(nodeId);
      const formatted = await readClusterId(p.kraftDir);
      if (formatted !== undefined && formatted !== clusterId) {
        throw new Error(`${p.kraftDir} belongs to cluster ${formatted}, not ${clusterId}; delete ${dataDir} to start afresh`);
      }
      if (formatted === undefined) await formatStorage(java, libsDir, p.propsPath, clusterId, false);
    }),
  );

  const running = new Map<number, LocalBroker>();
  const launchNode = (nodeId: number): Promise<LocalBroker> => {
    const p = paths(nodeId);
    return launch({
      java,
      libsDir,
      propsPath: p.propsPath,
      logsDir: p.logsDir,
      logFile: p.logFile,
      stdoutFile: p.stdoutFile,
      dataDir: p.dir,
      heapMb,
      port: ports.get(nodeId)!.port,
      nodeId,
      readyTimeoutMs: CLUSTER_READY_TIMEOUT_MS,
      // Three JVMs share a small machine: C1 only (no C2 compiler threads
      // competing with the brokers at start-up) and the serial collector
      // (no concurrent GC threads) for heaps this small.
      jvmFlags: ['-XX:TieredStopAtLevel=1', '-XX:+UseSerialGC'],
    });
  };
  const saveState = () =>
    writeClusterState(statePath, {
      clusterId,
      nodes: nodeIds.map((nodeId) => ({ nodeId, ...ports.get(nodeId)!, pid: running.get(nodeId)?.pid })),
    });

  const startedAt = performance.now();
  for (let attempt = 1; ; attempt++) {
    // All at once: no node is ready before a majority of controllers elects a leader.
    const results = await Promise.allSettled(nodeIds.map(launchNode));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (!failed) {
      results.forEach((r, i) => running.set(nodeIds[i]!, (r as PromiseFulfilledResult<LocalBroker>).value));
      break;
    }
    await Promise.all(results.map((r) => (r.status === 'fulfilled' ? r.value.stop() : undefined)));
    const portTaken = results.some((r) => r.status === 'rejected' && r.reason instanceof PortInUseError);
    if (!portTaken || attempt >= BIND_ATTEMPTS) throw failed.reason;
    log(`port taken while the cluster started, retrying on new ports: ${String(failed.reason?.message ?? failed.reason).split('\n')[0]}`);
    ports = await choosePortSet(nodeIds, undefined);
    await writeAll();
  }
  await saveState();
  const brokers = nodeIds.map((nodeId) => `127.0.0.1:${ports.get(nodeId)!.port}`);
  log(
    `local Kafka ${KAFKA_VERSION} cluster of ${size} nodes ready at ${brokers.join(',')} in ${((performance.now() - startedAt) / 1000).toFixed(1)} s (data ${dataDir})`,
  );

  const isUp = (nodeId: number): boolean => {
    const b = running.get(nodeId);
    return b !== undefined && brokersByDataDir.has(paths(nodeId).dir) && isAlive(b.pid);
  };
  const describe = (nodeId: number): LocalClusterNode => {
    const p = paths(nodeId);
    const up = isUp(nodeId);
    return { nodeId, ...ports.get(nodeId)!, pid: up ? running.get(nodeId)?.pid : undefined, running: up, dataDir: p.dir, logFile: p.logFile };
  };
  const down = async (nodeId: number, how: 'kill' | 'stop'): Promise<void> => {
    const b = running.get(nodeId);
    paths(nodeId);
    if (!b) return;
    if (how === 'kill') b.kill();
    else await b.stop();
    // kill() does not wait; the tracked exit does (SIGKILL: milliseconds).
    await waitForBrokerStartedHere(paths(nodeId).dir);
    running.delete(nodeId);
    await saveState();
  };

  return {
    brokers,
    size,
    clusterId,
    dataDir,
    nodes: () => nodeIds.map(describe),
    node: describe,
    kill: (nodeId) => down(nodeId, 'kill'),
    stopNode: (nodeId) => down(nodeId, 'stop'),
    async restart(nodeId) {
      paths(nodeId);
      if (isUp(nodeId)) throw new Error(`node ${nodeId} is running; kill() or stopNode() it first`);
      await waitForBrokerStartedHere(paths(nodeId).dir);
      const t = performance.now();
      // Same ports: they are in every node's voter list and in clients' bootstrap lists.
      running.set(nodeId, await launchNode(nodeId));
      await saveState();
      log(`node ${nodeId} back at 127.0.0.1:${ports.get(nodeId)!.port} in ${((performance.now() - t) / 1000).toFixed(1)} s (pid ${running.get(nodeId)!.pid})`);
    },
    async stop() {
      // At once: stopping one by one would leave the last nodes without a
      // controller majority, and their controlled shutdown would wait for one.
      await Promise.all([...running.values()].map((b) => b.stop()));
      running.clear();
      await saveState();
    },
  };
}

async function choosePortSet(
  nodeIds: number[],
  previous: ClusterState | undefined,
): Promise<Map<number, { port: number; controllerPort: number }>> {
  if (previous) {
    const all = previous.nodes.flatMap((n) => [n.port, n.controllerPort]);
    const free = await Promise.all(all.map(isPortFree));
    if (free.every(Boolean)) return new Map(previous.nodes.map((n) => [n.nodeId, { port: n.port, controllerPort: n.controllerPort }]));
  }
  // Every listener is held at once so that all the ports differ.
  const servers = await Promise.all(nodeIds.flatMap(() => [listenOnFreePort(), listenOnFreePort()]));
  const numbers = servers.map((server) => (server.address() as net.AddressInfo).port);
  await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
  return new Map(nodeIds.map((nodeId, i) => [nodeId, { port: numbers[2 * i]!, controllerPort: numbers[2 * i + 1]! }]));
}

async function readClusterState(statePath: string): Promise<ClusterState | undefined> {
  try {
    return JSON.parse(await readFile(statePath, 'utf8')) as ClusterState;
  } catch {
    return undefined;
  }
}

async function writeClusterState(statePath: string, state: ClusterState): Promise<void> {
  const temp = `${statePath}.${process.pid}.tmp`;
  await writeFile(temp, `${JSON.stringify(state, null, 2)}\n`);
  await rename(temp, statePath);
}

class PortInUseError extends Error {}

type LaunchOptions = {
  java: string;
  libsDir: string;
  propsPath: string;
  logsDir: string;
  logFile: string;
  stdoutFile: string;
  dataDir: string;
  heapMb: number;
  port: number;
  /** In a cluster: ready also means this node is registered and unfenced (listed in metadata). */
  nodeId?: number;
  /** JIT and GC flags; G1 with short pauses unless given. */
  jvmFlags?: string[];
  readyTimeoutMs?: number;
};

async function launch(o: LaunchOptions): Promise<LocalBroker> {
  const readyTimeoutMs = o.readyTimeoutMs ?? READY_TIMEOUT_MS;
  // Only this start's part of the appended log files belongs in an error.
  const logOffset = await fileSize(o.logFile);
  const stdoutOffset = await fileSize(o.stdoutFile);
  const jvmArgs = [
    `-Xms${Math.min(256, o.heapMb)}m`,
    `-Xmx${o.heapMb}m`,
    ...(o.jvmFlags ?? ['-XX:+UseG1GC', '-XX:MaxGCPauseMillis=20']),
    '-XX:+ExitOnOutOfMemoryError',
    '-Djava.awt.headless=true',
    `-Dkafka.logs.dir=${o.logsDir}`,
    `-Dlog4j2.configurationFile=${LOG4J2_CONFIG}`,
    '-cp',
    `${o.libsDir}${path.sep}*`,
    'kafka.Kafka',
    o.propsPath,
  ];
  const [command, args] = withParentDeathSignal(o.java, jvmArgs);
  // A file rather than a pipe: the broker must not block on, or die with, the
  // parent's stdout, and its chatter stays out of test output.
  const out = openSync(o.stdoutFile, 'a');
  let child: ChildProcess;
  try {
    child = spawn(command, args, { cwd: o.dataDir, stdio: ['ignore', out, out] });
  } finally {
    closeSync(out);
  }

  let exitInfo: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  const exited = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      exitInfo = { code, signal };
      runningBrokers.delete(child);
      resolve();
    });
  });
  const tracked: TrackedBroker = { exited, terminating: false };
  brokersByDataDir.set(o.dataDir, tracked);
  void exited.then(() => {
    if (brokersByDataDir.get(o.dataDir) === tracked) brokersByDataDir.delete(o.dataDir);
  });
  const spawnFailed = new Promise<never>((_, reject) => {
    child.once('error', (err: NodeJS.ErrnoException) =>
      reject(err.code === 'ENOENT' ? new Error(`Java 17+ is needed to run the Kafka broker, but ${command} was not found`) : err),
    );
  });
  spawnFailed.catch(noop);
  child.unref();
  if (child.pid === undefined) await spawnFailed;
  const pid = child.pid as number;
  trackForExit(child);

  const brokers = [`127.0.0.1:${o.port}`];
  const describeFailure = async (what: string): Promise<string> =>
    `${what}\n--- ${o.logFile} ---\n${tail(await readFrom(o.logFile, logOffset), 40)}\n--- ${o.stdoutFile} ---\n${tail(await readFrom(o.stdoutFile, stdoutOffset), 20)}`;

  const ready = await Promise.race([
    waitUntilReady(brokers, o.port, Date.now() + readyTimeoutMs, () => exitInfo !== undefined, o.nodeId),
    exited.then(() => false),
    spawnFailed,
  ]);
  if (!ready || exitInfo !== undefined) {
    if (exitInfo === undefined) {
      child.kill('SIGKILL');
      await exited;
      throw new Error(await describeFailure(`Kafka broker did not become ready within ${readyTimeoutMs / 1000} s`));
    }
    const info = exitInfo as { code: number | null; signal: NodeJS.Signals | null };
    const message = await describeFailure(
      `Kafka broker exited during start-up (${info.signal ?? `exit code ${info.code}`})`,
    );
    if (/Address already in use|BindException/.test(message)) throw new PortInUseError(message);
    throw new Error(message);
  }

  return {
    brokers,
    port: o.port,
    pid,
    dataDir: o.dataDir,
    logFile: o.logFile,
    async stop() {
      if (exitInfo !== undefined) return;
      // While waiting, the child must hold the event loop open, or a script
      // whose last step is stop() would exit before the broker has.
      child.ref();
      tracked.terminating = true;
      child.kill('SIGTERM');
      const escalate = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
      await exited;
      clearTimeout(escalate);
    },
    kill() {
      if (exitInfo !== undefined) return;
      tracked.terminating = true;
      // Held until the exit is reaped, so that a restart awaiting it does not
      // find an empty event loop; SIGKILL makes that a matter of milliseconds.
      child.ref();
      child.kill('SIGKILL');
    },
  };
}

async function waitUntilReady(
  brokers: string[],
  port: number,
  deadline: number,
  hasExited: () => boolean,
  nodeId?: number,
): Promise<boolean> {
  while (Date.now() < deadline && !hasExited()) {
    // A plain TCP probe first keeps kafkajs from logging connection errors
    // for the second or two before the listener exists.
    if (await canConnect(port)) {
      const admin = new Kafka({
        clientId: 'local-broker-readiness',
        brokers,
        logLevel: logLevel.NOTHING,
        connectionTimeout: 1_000,
        requestTimeout: 5_000,
        retry: { retries: 0 },
      }).admin();
      try {
        await admin.connect();
        const cluster = await admin.describeCluster();
        const registered = nodeId === undefined ? cluster.brokers.length > 0 : cluster.brokers.some((b) => b.nodeId === nodeId);
        if (registered && (await partitionsAreServed(admin))) return true;
      } catch {
        // Not ready yet: the listener accepts before the broker is unfenced,
        // and after a restart partitions get their leader a moment later.
      } finally {
        await admin.disconnect().catch(noop);
      }
    }
    await sleep(150);
  }
  return false;
}

/**
 * On a restart, metadata can be served before the broker has taken back
 * leadership of its partitions, and kafkajs' admin does not retry
 * NOT_LEADER_OR_FOLLOWER on ListOffsets; so ready means every existing
 * partition has a leader that answers ListOffsets.
 */
async function partitionsAreServed(admin: Admin): Promise<boolean> {
  const topics = await admin.listTopics();
  if (topics.length === 0) return true;
  const metadata = await admin.fetchTopicMetadata({ topics });
  if (metadata.topics.some((topic) => topic.partitions.some((partition) => partition.leader < 0))) return false;
  await Promise.all(topics.map((topic) => admin.fetchTopicOffsets(topic)));
  return true;
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
    socket.setTimeout(1_000, () => {
      socket.destroy();
      resolve(false);
    });
  });
}

type TrackedBroker = { exited: Promise<void>; terminating: boolean };

/** Brokers started by this process, so a restart can wait for the previous JVM to be gone. */
const brokersByDataDir = new Map<string, TrackedBroker>();

/**
 * kill() cannot wait, and until the old JVM has exited it still holds the
 * log directory lock and its ports; a restart right after kill() must wait
 * for it rather than race it.
 */
async function waitForBrokerStartedHere(dataDir: string): Promise<void> {
  const previous = brokersByDataDir.get(dataDir);
  if (previous === undefined) return;
  if (!previous.terminating) throw new Error(`a Kafka broker started by this process is still running on ${dataDir}; stop() it first`);
  await previous.exited;
}

const runningBrokers = new Set<ChildProcess>();
let exitHookInstalled = false;

function trackForExit(child: ChildProcess): void {
  runningBrokers.add(child);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Only synchronous work is possible here: send the signal and let the JVM
  // run its controlled shutdown on its own after we are gone.
  process.once('exit', () => {
    for (const broker of runningBrokers) {
      try {
        broker.kill('SIGTERM');
      } catch {
        // Already gone.
      }
    }
  });
}

let parentDeathSignalSupported: boolean | undefined;

/**
 * On Linux, `setpriv --pdeathsig` makes the kernel SIGTERM the broker when the
 * Node process dies without running exit handlers (SIGKILL, a test runner
 * terminating its worker). setpriv execs java, so the pid stays the JVM's.
 */
function withParentDeathSignal(command: string, args: string[]): [string, string[]] {
  if (parentDeathSignalSupported === undefined) {
    parentDeathSignalSupported =
      process.platform === 'linux' &&
      spawnSync('setpriv', ['--pdeathsig', 'TERM', 'true'], { stdio: 'ignore' }).status === 0;
  }
  return parentDeathSignalSupported ? ['setpriv', ['--pdeathsig', 'TERM', command, ...args]] : [command, args];
}

function findJava(): string {
  const javaHome = process.env.JAVA_HOME;
  if (javaHome) {
    const candidate = path.join(javaHome, 'bin', process.platform === 'win32' ? 'java.exe' : 'java');
    if (existsSync(candidate)) return candidate;
  }
  return 'java';
}

/**
 * Formats a KRaft log directory. A single node bootstraps a dynamic quorum of
 * itself (`--standalone`); a cluster node lists its voters statically in
 * `controller.quorum.voters`, so every node is formatted alike with the one
 * cluster id and no quorum flag.
 */
async function formatStorage(java: string, libsDir: string, propsPath: string, clusterId: string, standalone = true): Promise<void> {
  const args = [
    '-Xmx256m',
    `-Dlog4j2.configurationFile=${LOG4J2_CONFIG}`,
    `-Dkafka.logs.dir=${path.join(path.dirname(propsPath), 'logs')}`,
    '-cp',
    `${libsDir}${path.sep}*`,
    'kafka.tools.StorageTool',
    'format',
    '-t',
    clusterId,
    '-c',
    propsPath,
    ...(standalone ? ['--standalone'] : []),
    // Formatting an already formatted directory is then a no-op, which keeps
    // the data of earlier runs.
    '--ignore-formatted',
  ];
  // Asynchronous, so that a cluster's nodes are formatted side by side.
  const result = await new Promise<{ status: number | null; output: string; error?: NodeJS.ErrnoException }>((resolve) => {
    let output = '';
    const child = spawn(java, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.once('error', (error: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      resolve({ status: null, output, error });
    });
    child.once('exit', (status) => {
      clearTimeout(timer);
      resolve({ status, output });
    });
  });
  if (result.error) {
    throw result.error.code === 'ENOENT' ? new Error(`Java 17+ is needed to run the Kafka broker, but ${java} was not found`) : result.error;
  }
  if (result.status !== 0) {
    throw new Error(`formatting KRaft storage failed (exit ${result.status}):\n${tail(result.output, 30)}`);
  }
}

type ServerSettings = {
  dataDir: string;
  kraftDir: string;
  partitions: number;
  port: number;
  controllerPort: number;
  /** 1 for a single broker. */
  nodeId?: number;
  /** Every node's controller port in a cluster; absent for a single node. */
  voters?: { nodeId: number; controllerPort: number }[];
};

/**
 * Replication of the internal topics and the broker defaults: 3 replicas and
 * `min.insync.replicas` 2 from three nodes on (acks=-1 then survives one
 * node down), otherwise as many replicas as there are nodes and 1.
 */
function replicationOf(nodes: number): { factor: number; minIsr: number } {
  const factor = Math.min(3, nodes);
  return { factor, minIsr: factor >= 3 ? 2 : 1 };
}

async function writeServerProperties(propsPath: string, s: ServerSettings): Promise<void> {
  const { factor, minIsr } = replicationOf(s.voters?.length ?? 1);
  const lines = [
    '# Written by infra/kafka/local-broker.ts on every start; edits are overwritten.',
    'process.roles=broker,controller',
    `node.id=${s.nodeId ?? 1}`,
    s.voters
      ? `controller.quorum.voters=${s.voters.map((v) => `${v.nodeId}@127.0.0.1:${v.controllerPort}`).join(',')}`
      : `controller.quorum.bootstrap.servers=127.0.0.1:${s.controllerPort}`,
    `listeners=PLAINTEXT://127.0.0.1:${s.port},CONTROLLER://127.0.0.1:${s.controllerPort}`,
    `advertised.listeners=PLAINTEXT://127.0.0.1:${s.port}`,
    'controller.listener.names=CONTROLLER',
    'inter.broker.listener.name=PLAINTEXT',
    'listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT',
    `log.dirs=${s.kraftDir}`,
    `num.partitions=${s.partitions}`,
    `default.replication.factor=${factor}`,
    `min.insync.replicas=${minIsr}`,
    `offsets.topic.replication.factor=${factor}`,
    // The default of 50 partitions makes the first consumer group noticeably slower to start.
    'offsets.topic.num.partitions=10',
    `transaction.state.log.replication.factor=${factor}`,
    `transaction.state.log.min.isr=${minIsr}`,
    `share.coordinator.state.topic.replication.factor=${factor}`,
    `share.coordinator.state.topic.min.isr=${minIsr}`,
    // After a crash the restarted controller still holds the dead
    // incarnation's registration and only accepts the new one once that
    // session expires: 9 s by default, which is most of a restart. In a
    // cluster the same timeout is how soon a killed node is fenced, i.e.
    // leaves every ISR and hands over its leaderships.
    'broker.heartbeat.interval.ms=500',
    'broker.session.timeout.ms=3000',
    'group.initial.rebalance.delay.ms=0',
    'auto.create.topics.enable=false',
    // Data lives until the data directory is deleted; topics may still set their own retention.
    'log.retention.ms=-1',
    'log.retention.bytes=-1',
    // The cleaner allocates its dedupe buffer up front from the heap; the
    // 128 MiB default is too much for a 256 MiB-1 GiB test broker.
    'log.cleaner.enable=true',
    'log.cleaner.threads=1',
    'log.cleaner.dedupe.buffer.size=16777216',
    'log.cleaner.io.buffer.size=524288',
    'log.cleaner.backoff.ms=1000',
    ...(s.voters
      ? [
          // Three JVMs share a small machine: fewer threads than the defaults (3, 8, 10).
          'num.network.threads=2',
          'num.io.threads=4',
          'background.threads=4',
          'transaction.state.log.num.partitions=10',
          // A follower that is alive but stops fetching leaves the ISR after
          // 10 s instead of 30 s (a killed one leaves sooner, when fenced).
          'replica.lag.time.max.ms=10000',
        ]
      : []),
    '',
  ];
  await writeFile(propsPath, lines.join('\n'));
}

async function choosePorts(previous: BrokerState | undefined): Promise<{ port: number; controllerPort: number }> {
  if (previous && (await isPortFree(previous.port)) && (await isPortFree(previous.controllerPort))) {
    return { port: previous.port, controllerPort: previous.controllerPort };
  }
  // Both listeners are held at once so the two ports differ.
  const servers = await Promise.all([listenOnFreePort(), listenOnFreePort()]);
  const [port, controllerPort] = servers.map((server) => (server.address() as net.AddressInfo).port);
  await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
  return { port: port as number, controllerPort: controllerPort as number };
}

function listenOnFreePort(): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

function isPortFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

async function readState(statePath: string): Promise<BrokerState | undefined> {
  try {
    return JSON.parse(await readFile(statePath, 'utf8')) as BrokerState;
  } catch {
    return undefined;
  }
}

async function writeState(statePath: string, state: BrokerState): Promise<void> {
  const temp = `${statePath}.${process.pid}.tmp`;
  await writeFile(temp, `${JSON.stringify(state, null, 2)}\n`);
  await rename(temp, statePath);
}

/**
 * After kill() the old JVM may still be exiting and holding the log
 * directory's lock; a broker that another live process owns is an error.
 */
async function waitForPreviousBroker(pid: number, propsPath: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (isAlive(pid) && isOurBroker(pid, propsPath)) {
    if (Date.now() > deadline) {
      throw new Error(`a Kafka broker (pid ${pid}) is still running on ${path.dirname(propsPath)}; stop it first`);
    }
    await sleep(100);
  }
}

function isOurBroker(pid: number, propsPath: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(propsPath);
  } catch {
    // No procfs (macOS) or the process is gone: Kafka's own lock on the log
    // directory still refuses a second broker with a clear message.
    return false;
  }
}

async function readClusterId(kraftDir: string): Promise<string | undefined> {
  try {
    const text = await readFile(path.join(kraftDir, 'meta.properties'), 'utf8');
    return /^cluster\.id=(.+)$/m.exec(text)?.[1]?.trim();
  } catch {
    return undefined;
  }
}

/** Same shape as `kafka-storage random-uuid`: 16 random bytes, URL-safe base64, not starting with '-'. */
function newClusterId(): string {
  for (;;) {
    const id = randomBytes(16).toString('base64url');
    if (!id.startsWith('-')) return id;
  }
}

async function fileSize(file: string): Promise<number> {
  try {
    return (await stat(file)).size;
  } catch {
    return 0;
  }
}

async function readFrom(file: string, offset: number): Promise<string> {
  try {
    const handle = await open(file, 'r');
    try {
      const size = (await handle.stat()).size;
      const start = Math.max(offset, size - 256 * 1024);
      const buffer = Buffer.alloc(Math.max(0, size - start));
      await handle.read(buffer, 0, buffer.length, start);
      return buffer.toString('utf8');
    } finally {
      await handle.close();
    }
  } catch {
    return '(no output)';
  }
}

function tail(text: string, lines: number): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}
