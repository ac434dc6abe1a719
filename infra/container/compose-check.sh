#!/usr/bin/env bash
# Checks compose.yaml as far as this machine allows (no registry, so no
# ClickHouse server image and no apache/kafka image):
#   1. the file validates (docker-compose 1.29's schema, from Debian);
#   2. podman-compose runs its `kafka`, `ingest` and `fanout` services for real,
#      with the runtime's local Kafka image and the service image built by
#      `npm run test:image` (SERVICE_IMAGE), and waits until every one of them
#      passes its own compose/image healthcheck (and ingest's /readyz answers
#      200 on its published port);
#   3. tears it all down, volumes and network included.
# `api` and `projector` need the ClickHouse server and are not started here.
# Run from the project root with the container runtime up; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/../.."

PROJECT=va-compose-check
SERVICE_IMAGE=${SERVICE_IMAGE:-localhost/video-analytics:test}
KAFKA_IMAGE=${TEST_KAFKA_IMAGE:-localhost/kafka-cp-compat:8.0.0}
log() { printf '[compose-check %s] %s\n' "$(date +%T)" "$*"; }

if ! command -v docker-compose >/dev/null || ! command -v podman-compose >/dev/null; then
  log "installing docker-compose and podman-compose (Debian)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-compose podman-compose >/dev/null
fi
podman image exists "$SERVICE_IMAGE" || { log "no image $SERVICE_IMAGE: run npm run test:image first"; exit 1; }

# Throwaway values for the variables compose.yaml requires.
export ADMIN_TOKEN="adm_$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export CURSOR_SECRET="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export SECRETS_KEY="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export CLICKHOUSE_PASSWORD=compose-check
export SERVICE_IMAGE KAFKA_IMAGE
# The local image ships storage formatted for testcontainers' cluster id.
export KAFKA_CLUSTER_ID=4L6g3nShT-eMCtK--X86sw
# Free loopback ports, so that nothing else on the machine is in the way.
free_port() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
export PATH="$PWD/node_modules/node/bin:$PATH"
export API_PORT=$(free_port) INGEST_PORT=$(free_port)

log "validating compose.yaml"
docker-compose -f compose.yaml config -q
services=$(docker-compose -f compose.yaml config --services | sort | tr '\n' ' ')
[[ $services == "api clickhouse derived fanout ingest kafka projector " ]] || { log "unexpected services: $services"; exit 1; }

compose() { podman-compose -p "$PROJECT" -f compose.yaml "$@"; }
cleanup() {
  compose down -v >/dev/null 2>&1 || true
  podman network rm -f "${PROJECT}_default" >/dev/null 2>&1 || true
}
trap cleanup EXIT
cleanup

start=$SECONDS
log "podman-compose up kafka ingest fanout (Kafka $KAFKA_IMAGE, service $SERVICE_IMAGE)"
compose up -d --no-build --no-deps kafka ingest fanout >/tmp/$PROJECT-up.log 2>&1 || { cat /tmp/$PROJECT-up.log; exit 1; }

# podman runs healthchecks from systemd timers, and there is no systemd here:
# run each container's healthcheck by hand until it passes.
healthy() { podman healthcheck run "${PROJECT}_$1_1" >/dev/null 2>&1; }
for svc in kafka ingest fanout; do
  for _ in $(seq 120); do healthy "$svc" && break; sleep 1; done
  if ! healthy "$svc"; then
    log "$svc not healthy; its log:"; podman logs --tail 40 "${PROJECT}_${svc}_1" 2>&1; exit 1
  fi
  log "$svc healthy after $((SECONDS - start)) s"
done
status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$INGEST_PORT/readyz")
[[ $status == 200 ]] || { log "ingest /readyz on 127.0.0.1:$INGEST_PORT answered $status"; exit 1; }
log "ingest /readyz 200 on its published port; kafka, ingest and fanout from compose.yaml up in $((SECONDS - start)) s"
