#!/usr/bin/env bash
# A real sshd on loopback for the SSH backend's tests and CI (run as root).
#
# Installs openssh-server when missing, keeps a host key and a client key under DIR
# (BERTH_TEST_SSHD_DIR, default /var/lib/berth-test-sshd, 0755 so StrictModes accepts it),
# authorizes the client key for root, and makes sure this sshd answers on 127.0.0.1:PORT
# (BERTH_TEST_SSH_PORT, default 2222). Idempotent: keys are made once, and an sshd that already
# answers on the port with this host key is reused; one that answers with another key is an
# error (the port belongs to someone else).
#
# Prints `export BERTH_TEST_SSH_*=...` lines on stdout, for `eval "$(bash scripts/ensure-sshd.sh)"`:
#   HOST, PORT, USER (root), KEY (client private key), KNOWN_HOSTS, DIR
# and, on fd 3, the pid of an sshd it started (nothing when one was reused), so callers stop
# only what they started: `bash scripts/ensure-sshd.sh 3>pidfile`.
set -euo pipefail
dir=${BERTH_TEST_SSHD_DIR:-/var/lib/berth-test-sshd}
port=${BERTH_TEST_SSH_PORT:-2222}
host=127.0.0.1

say() { echo "ensure-sshd: $*" >&2; }

if [ "$(id -u)" != 0 ]; then
  say "must run as root (sshd, /run/sshd and the test accounts need it)"
  exit 1
fi
if [ ! -x /usr/sbin/sshd ] || ! command -v ssh-keyscan >/dev/null 2>&1; then
  say "installing openssh-server and openssh-client"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client >&2
fi

# sshd refuses to start without its privilege separation dir.
mkdir -p -m 755 /run/sshd "$dir"
chmod 755 "$dir"
[ -f "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_ed25519" -C berth-test-host
[ -f "$dir/client_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/client_ed25519" -C berth-test-client
chmod 600 "$dir/host_ed25519" "$dir/client_ed25519"
# SHLVL=1 stops bash (as sshd starts it for each channel) from sourcing root's ~/.bashrc, as
# root's shell on a dedicated remote would not: on a dev machine that file may take seconds
# (pyenv, nvm) and would be timed as the cost of every channel. Test fixture only: berth
# itself does not depend on it (its launcher clears the environment).
printf 'environment="SHLVL=1" %s\n' "$(cat "$dir/client_ed25519.pub")" > "$dir/authorized_keys"
chmod 644 "$dir/authorized_keys"
host_key=$(cut -d' ' -f1,2 "$dir/host_ed25519.pub")
printf '[%s]:%s %s\n' "$host" "$port" "$host_key" > "$dir/known_hosts"
chmod 644 "$dir/known_hosts"

# Agent forwarding is allowed here on purpose: the tests then show that berth never asks for it.
cat > "$dir/sshd_config.new" <<CFG
ListenAddress $host
Port $port
HostKey $dir/host_ed25519
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowAgentForwarding yes
AllowTcpForwarding no
X11Forwarding no
StrictModes yes
PermitUserEnvironment SHLVL
MaxSessions 10
MaxStartups 50:30:100
Subsystem sftp internal-sftp
CFG
/usr/sbin/sshd -t -f "$dir/sshd_config.new"
changed=1
cmp -s "$dir/sshd_config.new" "$dir/sshd_config" 2>/dev/null && changed=0
mv -f "$dir/sshd_config.new" "$dir/sshd_config"

answers() { (exec 9<>"/dev/tcp/$host/$port") 2>/dev/null; }

if answers; then
  seen=$(ssh-keyscan -T 5 -t ed25519 -p "$port" "$host" 2>/dev/null | awk '!/^#/ { print $2, $3; exit }')
  if [ "$seen" != "$host_key" ]; then
    say "something else answers on $host:$port (host key ${seen:-unreadable}, expected $host_key);"
    say "stop it or pick another port with BERTH_TEST_SSH_PORT"
    exit 1
  fi
  # Ours, started with an older config (this script changed): replace it so the tests see this one.
  old=$(cat "$dir/sshd.pid" 2>/dev/null || true)
  if [ "$changed" = 1 ] && [ -n "$old" ] && [ "$(cat "/proc/$old/comm" 2>/dev/null)" = sshd ]; then
    say "restarting sshd $old with the new config"
    kill "$old"
    for _ in $(seq 1 50); do answers || break; sleep 0.1; done
  fi
fi
if ! answers; then
  rm -f "$dir/sshd.pid"
  # By absolute path: sshd re-executes itself for every connection.
  /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log"
  for _ in $(seq 1 100); do answers && [ -s "$dir/sshd.pid" ] && break; sleep 0.1; done
  if ! answers; then
    say "sshd did not answer on $host:$port within 10 s; see $dir/sshd.log"
    tail -20 "$dir/sshd.log" >&2 || true
    exit 1
  fi
  { cat "$dir/sshd.pid" >&3; } 2>/dev/null || true
fi

printf 'export BERTH_TEST_SSH_HOST=%q\n' "$host"
printf 'export BERTH_TEST_SSH_PORT=%q\n' "$port"
printf 'export BERTH_TEST_SSH_USER=%q\n' root
printf 'export BERTH_TEST_SSH_KEY=%q\n' "$dir/client_ed25519"
printf 'export BERTH_TEST_SSH_KNOWN_HOSTS=%q\n' "$dir/known_hosts"
printf 'export BERTH_TEST_SSHD_DIR=%q\n' "$dir"
