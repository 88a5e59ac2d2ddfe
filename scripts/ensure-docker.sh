#!/usr/bin/env bash
# Makes a Docker engine available on this machine: installs docker.io from Debian if missing and
# starts dockerd in the background when no engine answers. Prints the dockerd pid it started (or
# nothing when an engine was already running) on fd 3, so callers can stop what they started.
set -euo pipefail

command -v dockerd >/dev/null 2>&1 || bash "$(dirname "$0")/apt-install.sh" "the Docker engine" docker.io

if docker info >/dev/null 2>&1; then
  exit 0
fi

echo "ensure-docker: starting dockerd" >&2
# The open-files limit docker's own service unit gives it (LimitNOFILE=infinity): the engine holds
# ~21 fds per running sandbox with its shell and warden attached, so the shell's limit (often
# 1,024 or 20,000) runs it out of descriptors long before 1,000 sandboxes.
( ulimit -n "$(cat /proc/sys/fs/nr_open)" 2>/dev/null || ulimit -n 1048576 2>/dev/null || true
  exec dockerd >/tmp/berth-dockerd.log 2>&1 ) &
pid=$!
for _ in $(seq 1 120); do
  if [ -S /var/run/docker.sock ] && docker info >/dev/null 2>&1; then
    { echo "$pid" >&3; } 2>/dev/null || true
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "ensure-docker: dockerd exited; see /tmp/berth-dockerd.log" >&2
    tail -20 /tmp/berth-dockerd.log >&2 || true
    exit 1
  fi
  sleep 0.5
done
echo "ensure-docker: dockerd did not answer within 60 s; see /tmp/berth-dockerd.log" >&2
exit 1
