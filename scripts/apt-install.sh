#!/usr/bin/env bash
# Installs Debian packages, saying in one line on stderr what and why; apt's own output goes to a
# log file (named in that line, and its tail printed when apt fails).
#   usage: apt-install.sh WHY PACKAGE...
set -euo pipefail
why=$1
shift
log=${BERTH_APT_LOG:-/tmp/berth-apt.log}
echo "installing $* ($why); apt's output: $log" >&2
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >>"$log" 2>&1; then
  echo "apt-get could not install $*; the end of $log:" >&2
  tail -20 "$log" >&2
  exit 1
fi
