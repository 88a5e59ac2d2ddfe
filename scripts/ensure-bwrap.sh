#!/usr/bin/env bash
# Makes bubblewrap (the bwrap backend's sandbox tool) and python3-seccomp (libseccomp's maintained
# compiler, used to check the shipped syscall filter against a fresh build) available. Installs them
# only when missing.
set -euo pipefail

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
python3 -c 'import seccomp' >/dev/null 2>&1 || need+=(python3-seccomp)
if [ "${#need[@]}" -eq 0 ]; then
  exit 0
fi
echo "ensure-bwrap: installing ${need[*]}" >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
bwrap --version >&2
