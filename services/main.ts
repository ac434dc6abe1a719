import { resolve } from 'node:path';
import { ConfigError, loadConfig } from '../shared/config.ts';
import { createLogger } from '../shared/logger.ts';
import { startStack } from './stack.ts';

/**
 * `npm start`: the whole stack in one process (or the subset named by
 * --services / SERVICES). Prints where everything is, stops cleanly on
 * SIGTERM and SIGINT.
 */
async function main(): Promise<void> {
  const arg = process.argv.find((a) => a.startsWith('--services='));
  const idx = process.argv.indexOf('--services');
  const servicesArg = arg?.split('=')[1] ?? (idx >= 0 ? process.argv[idx + 1] : undefined);
  let config;
  try {
    config = loadConfig(servicesArg ? { ...process.env, SERVICES: servicesArg } : process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const log = createLogger({ level: config.LOG_LEVEL });
  // Everything this process and its children (the local broker) create in
  // DATA_DIR is for its owner only: ClickHouse parts, Kafka logs, secrets.
  process.umask(0o077);
  const stack = await startStack(config, log);

  // NOTE: never the token itself: stdout ends up in log collectors and terminal scrollback.
  const tokenSource = config.ADMIN_TOKEN ? 'from the ADMIN_TOKEN environment variable' : `stored in ${resolve(config.DATA_DIR, 'admin-token')}`;
  process.stdout.write(
    [
      '',
      'Video analytics service is running',
      `  API base      ${stack.url}/v1`,
      `  Player intake ${stack.url}/v1/collect`,
      `  Management    ${stack.url}/admin/v1`,
      `  API docs      ${stack.url}/docs  (OpenAPI: ${stack.url}/v1/openapi.json)`,
      ...(config.SERVICES.includes('admin') ? [`  Dashboard     ${stack.url}/dashboard  (sign in with the admin token)`] : []),
      `  Health        ${stack.url}/healthz  ${stack.url}/readyz  ${stack.url}/metrics`,
      `  Kafka         ${stack.kafkaDescribe}`,
      `  ClickHouse    ${stack.clickhouseDescribe}`,
      `  Admin token   ${tokenSource}`,
      '',
      '',
    ].join('\n'),
  );

  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutdown_started');
    const force = setTimeout(() => {
      log.error('shutdown_timed_out');
      process.exit(1);
    }, config.SHUTDOWN_TIMEOUT_MS);
    force.unref();
    stack.stop().then(
      () => {
        log.info('shutdown_complete');
        process.exit(0);
      },
      (err: unknown) => {
        log.error({ err }, 'shutdown_failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

main().catch((err: unknown) => {
  process.stderr.write(`failed to start: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
