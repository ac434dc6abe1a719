import pino, { type Logger } from 'pino';

export type { Logger };

/**
 * Paths redacted from every log line: credentials travel in these headers and
 * fields, and a log is no place for them.
 */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers["x-player-key"]',
  'req.headers.cookie',
  'req.query.key',
  'headers.authorization',
  'authorization',
  'key',
  'api_key',
  'player_key',
  'previous_player_key',
  'secret',
  'token',
  'admin_token',
  'password',
  '*.key',
  '*.secret',
  '*.token',
  '*.player_key',
  '*.previous_player_key',
  '*.password',
];

/** The one root logger of a process; services take children of it. */
export function createLogger(opts: { level: string; service?: string; destination?: pino.DestinationStream }): Logger {
  return pino(
    {
      level: opts.level,
      base: { service: opts.service ?? 'video-analytics' },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
      serializers: {
        err: pino.stdSerializers.err,
        req: (req: { method?: string; url?: string; id?: string }) => ({
          method: req.method,
          // The query string can carry a player key (sendBeacon), so only the path is logged.
          path: typeof req.url === 'string' ? req.url.split('?')[0] : undefined,
          id: req.id,
        }),
      },
    },
    opts.destination,
  );
}
