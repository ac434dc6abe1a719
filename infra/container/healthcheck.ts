/**
 * The image's HEALTHCHECK: exits 0 when `GET /readyz` answers 200 (Kafka and
 * ClickHouse reachable, consumers running), 1 otherwise. Runs inside the
 * container, so it asks the service on loopback at its own PORT.
 */
const port = process.env.PORT ?? '3000';
try {
  const res = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(4000) });
  if (res.status !== 200) {
    process.stderr.write(`readyz answered ${res.status}: ${(await res.text()).slice(0, 500)}\n`);
    process.exit(1);
  }
  process.exit(0);
} catch (err) {
  process.stderr.write(`readyz unreachable: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
