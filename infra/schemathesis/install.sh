#!/usr/bin/env bash
# Installs schemathesis (PyPI) into a virtualenv under .cache/schemathesis, so
# test/openapi-contract.test.ts can run it against the live OpenAPI document.
# Idempotent: a second run only checks the installed version.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION="${SCHEMATHESIS_VERSION:-4.32.5}"
VENV=".cache/schemathesis"
if [ -x "$VENV/bin/schemathesis" ] && "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "$VERSION"; then
  exit 0
fi
PY="$(command -v python3 || true)"
if [ -z "$PY" ] || ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "installing python3 and venv"
  apt-get update -qq && apt-get install -y -qq python3 python3-venv python3-pip >/dev/null
  PY="$(command -v python3)"
fi
echo "installing schemathesis $VERSION into $VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$VERSION"
"$VENV/bin/schemathesis" --version
