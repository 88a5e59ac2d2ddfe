#!/usr/bin/env bash
# Makes Debian's chromium available at /usr/bin/chromium for the dashboard test (driven headless
# by playwright-core; no browser download). Installs it only when missing.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi
echo "ensure-chromium: installing chromium" >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
/usr/bin/chromium --version >&2
