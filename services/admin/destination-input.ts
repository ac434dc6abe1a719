import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { DestinationRecord } from '../../schemas/records.ts';
import { WEBHOOK_EVENT_NAMES } from '../../shared/event-names.ts';
import { DisplayName, isoTime } from '../../shared/http/schemas.ts';
import { type SecretBox, secretHint, shownHint } from '../../shared/secrets.ts';

/**
 * What a client may send for a destination, and how a stored destination is
 * shown. Pure: no I/O.
 */

const MAX_URL_LENGTH = 2048;

export const EventNames = z
  .array(z.enum(WEBHOOK_EVENT_NAMES as [string, ...string[]], { error: () => `unknown event name; expected one of ${WEBHOOK_EVENT_NAMES.join(', ')}` }))
  .max(WEBHOOK_EVENT_NAMES.length * 2)
  .transform((list) => [...new Set(list)])
  .meta({ description: 'Event names of spec 6.1 to receive; absent or empty: every event' });

/**
 * An https URL without credentials, stored in its WHATWG-normalised form
 * (lower-case scheme and host, punycode, default port dropped, path escapes
 * normalised), so the same endpoint is one string. Text the URL parser
 * refuses (a space in the host, a port above 65535, an empty string) is a
 * 422 like any other bad field; the messages never repeat the URL, which
 * may carry a token in its query.
 */
export const HttpsUrl = z
  .string()
  .max(MAX_URL_LENGTH)
  .transform((raw, ctx) => {
    const url = URL.parse(raw.trim());
    if (!url || url.protocol !== 'https:' || !url.hostname) {
      ctx.addIssue({ code: 'custom', message: 'must be an https:// URL' });
      return z.NEVER;
    }
    if (url.username || url.password) {
      ctx.addIssue({ code: 'custom', message: 'must not carry credentials' });
      return z.NEVER;
    }
    if (url.href.length > MAX_URL_LENGTH) {
      ctx.addIssue({ code: 'custom', message: `must be at most ${MAX_URL_LENGTH} characters once normalised` });
      return z.NEVER;
    }
    return url.href;
  })
  .meta({ description: 'An https:// URL without credentials; stored normalised (WHATWG URL)' });

const IntegrationConfig = z.object({ webhook_secret: z.string().max(1024).optional() }).strict();

/**
 * One object rather than a union per kind, so that a refusal names its field
 * (`body.url`), not just `body`.
 */
export const CreateDestination = z
  .object({
    kind: z.enum(['webhook', 'integration']).optional().meta({ description: 'Default webhook' }),
    name: DisplayName,
    url: HttpsUrl,
    events: EventNames.optional(),
    config: IntegrationConfig.optional().meta({ description: 'Required for an integration, refused for a webhook' }),
  })
  .strict()
  .superRefine((b, ctx) => {
    if (b.kind === 'integration' && !b.config) ctx.addIssue({ code: 'custom', path: ['config'], message: 'required for an integration' });
    if (b.kind !== 'integration' && b.config) ctx.addIssue({ code: 'custom', path: ['config'], message: 'only integrations have a config' });
  });

export const PatchDestination = z
  .object({
    name: DisplayName.optional(),
    url: HttpsUrl.optional(),
    events: EventNames.optional(),
    config: IntegrationConfig.optional(),
  })
  .strict();

export const newSecret = (): string => `whsec_${randomBytes(24).toString('base64url')}`;

/** The record with `secret` sealed to it (an empty secret: none). */
export function withSecret(secrets: SecretBox, d: DestinationRecord, secret: string): DestinationRecord {
  return { ...d, secret_enc: secret ? secrets.seal(secret, d.id) : null, secret_hint: secret ? secretHint(secret) : null };
}

/** A destination as the API shows it: the secret masked. */
export function destinationView(d: DestinationRecord) {
  return {
    id: d.id,
    kind: d.kind,
    name: d.name,
    url: d.url,
    events: d.events,
    secret_masked: shownHint(d.secret_hint),
    created_at: isoTime(d.created_at),
    updated_at: isoTime(d.updated_at),
  };
}
