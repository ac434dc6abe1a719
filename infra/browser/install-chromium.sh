#!/usr/bin/env bash
# Installs Debian's Chromium for the dashboard's browser tests
# (test/dashboard.e2e.test.ts drives /usr/bin/chromium with playwright-core).
# Idempotent: does nothing when chromium is already installed. Runs as root
# on CI and these machines; uses sudo otherwise.
set -euo pipefail

if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "Installing chromium with apt-get…" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

if [ ! -x /usr/bin/chromium ]; then
  echo "chromium is installed at $(command -v chromium), but the tests expect /usr/bin/chromium" >&2
  exit 1
fi

# NOTE: Debian's wrapper script prints a harmless shell warning on some
# machines while checking memory; only the version line matters here.
chromium --version 2>/dev/null
