import { shQuote } from '../../shell/protocol.js';

/*
 * Each SSH sandbox's own PID, IPC and mount namespaces on the host.
 *
 * A holder keeps them: a root bash that is pid 1 of the sandbox's PID namespace, made by
 * `unshare --pid --fork --ipc --mount` and detached from any connection (setsid, no pipes). In
 * its mount namespace it mounts a /proc of its own (the sandbox sees its own processes only) and
 * a size-bounded tmpfs over each dir every account on a host may write (/tmp, /var/tmp,
 * /dev/shm, /run/lock, a /var/lock that is a dir of its own) and a fresh mqueue fs over
 * /dev/mqueue. Its host pid and start time are recorded in /var/lib/berth/ns/<account> (root's,
 * 0700), so the next spawn, from this berth or one started later, finds it; the start time tells
 * it from a later process that got the same pid. Every spawn (shells, jobs, helpers, the warden)
 * enters it with nsenter before it drops to the account (launcher.ts), and so do the root
 * helpers that look for a spawn's processes by pid (their pids are the namespace's).
 *
 * Ending the holder ends the sandbox: the kernel kills every process of a PID namespace whose
 * pid 1 exits, and its IPC objects and tmpfs go with the last of them. Stop and remove end it
 * (account-scripts.ts); a holder that died any other way (a reboot) is made again by the next
 * spawn, with empty temp dirs, as a container restart empties its tmpfs.
 */

/** Where the holders are recorded (with a lock file per account). */
export const NS_DIR = '/var/lib/berth/ns';

/** The shared temp dirs a sandbox gets its own, empty, tmpfs over, as the sandbox sees them. */
export const PRIVATE_DIRS: readonly string[] = ['/dev/shm', '/run/lock', '/tmp', '/var/tmp'];

/** /run/lock (and /var/lock) holds lock and pid files only. */
const LOCK_DIR_SIZE = '8m';

/**
 * The holder, run as `unshare --pid --fork --kill-child --ipc --mount --propagation private --
 * bash -c HOLDER_SCRIPT berth-holder FIFO SIZE_MB`. It reads its host pid while /proc is still the
 * host's, mounts, then writes `ready PID STARTTIME` (or `E why`) to FIFO and waits forever.
 * Orphans of the sandbox are reparented to it: `wait` reaps them while it waits for its sleep
 * (a bash blocked in `read` would leave them zombies).
 */
const HOLDER_SCRIPT = `
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
cd /
exec 3>"$1" || exit 1
size=$2
say() { printf '%s\\n' "$*" >&3; }
{ read -r l < /proc/self/stat; } 2>/dev/null || { say 'E cannot read /proc/self/stat'; exit 1; }
hp=\${l%% *}
set -- \${l##*) }
st=\${20}
mount -t proc -o nosuid,nodev,noexec proc /proc || { say 'E cannot mount a /proc of its own'; exit 1; }
done_dirs=()
for d in /tmp /var/tmp /dev/shm /run/lock /var/lock; do
  [[ -d $d ]] || continue
  for m in "\${done_dirs[@]}"; do [[ $d -ef $m ]] && continue 2; done
  o=nosuid,nodev,mode=1777,size=\${size}m
  [[ $d == */lock ]] && o=nosuid,nodev,noexec,mode=1777,size=${LOCK_DIR_SIZE}
  mount -t tmpfs -o "$o" berth-tmp "$d" || { say "E cannot mount a tmpfs on $d"; exit 1; }
  done_dirs+=("$d")
done
if [[ -d /dev/mqueue ]]; then mount -t mqueue -o nosuid,nodev,noexec berth-mqueue /dev/mqueue || { say 'E cannot mount /dev/mqueue'; exit 1; }; fi
say "ready $hp $st"
exec 3>&-
while :; do sleep 2147483647 & wait; done
`;

/**
 * Bash functions for root scripts, about account `$1`'s holder:
 * - `holder_lock`: takes the account's lock (fd 6; a lock file removed meanwhile is taken anew);
 *   `holder_unlock` lets it go. Creating, ending and removing a holder happen under it.
 * - `holder_open`: true when a live holder is recorded; its pid in `holder`, its PID, mount and
 *   IPC namespaces open on fds 3, 4 and 5. The start time is checked after the opens, so the fds
 *   are the holder's even if it ended and its pid was taken meanwhile. `holder_close` closes them.
 * - `holder_stop` (lock held): ends the holder, so every process in its namespaces, and forgets it.
 */
export const HOLDER_FUNCTIONS = `
ns_dir=${NS_DIR}
holder_lock() {
  local f=$ns_dir/$1.lock i
  [[ -d $ns_dir ]] || mkdir -p -m 0700 -- "$ns_dir" || return 1
  for ((i = 0; i < 20; i++)); do
    exec 6>>"$f" || return 1
    flock -w 60 6 || { exec 6>&-; return 1; }
    [[ /proc/self/fd/6 -ef $f ]] && return 0
    exec 6>&-
  done
  return 1
}
holder_unlock() { exec 6>&-; }
holder_close() { exec 3<&- 4<&- 5<&-; }
holder_open() {
  local hp= st= l
  { read -r hp st < "$ns_dir/$1"; } 2>/dev/null
  [[ $hp =~ ^[1-9][0-9]*$ && $st =~ ^[0-9]+$ ]] || return 1
  { exec 3<"/proc/$hp/ns/pid" 4<"/proc/$hp/ns/mnt" 5<"/proc/$hp/ns/ipc"; } 2>/dev/null || { holder_close; return 1; }
  { read -r l < "/proc/$hp/stat"; } 2>/dev/null || { holder_close; return 1; }
  set -- \${l##*) }
  [[ \${20} == "$st" ]] || { holder_close; return 1; }
  holder=$hp
}
holder_stop() {
  if holder_open "$1"; then
    holder_close
    kill -KILL "$holder" 2>/dev/null
  fi
  rm -f -- "$ns_dir/$1"
}
`;

/**
 * Bash function for the launcher: `holder_start NAME SIZE_MB` (lock held) makes account NAME's
 * holder, its temp dirs SIZE_MB MiB each, records it and opens it as `holder_open` does. A refusal
 * prints `E why` and returns 1. The holder inherits none of the caller's fds (the lock, the
 * channel's pipes) nor its environment; it answers on a FIFO it opens by name. Its parent, the
 * `unshare` process (in its own session), kills it if it dies itself (--kill-child), which is how
 * a holder that did not answer in time is ended.
 */
export const HOLDER_START = `
holder_start() {
  local fifo=$ns_dir/$1.fifo line=
  # Removed meanwhile (its lock file, made again by this call, goes too).
  getent passwd "$1" >/dev/null || { rm -f -- "$ns_dir/$1.lock"; printf 'E no account %s on this host: the sandbox was removed\\n' "$1"; return 1; }
  rm -f -- "$fifo" && mkfifo -m 0600 -- "$fifo" && exec 7<>"$fifo" || { printf 'E cannot make %s\\n' "$fifo"; return 1; }
  ( exec -c setsid unshare --pid --fork --kill-child --ipc --mount --propagation private -- /bin/bash --noprofile --norc -c ${shQuote(HOLDER_SCRIPT)} berth-holder "$fifo" "$2" ) </dev/null >/dev/null 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- &
  read -r -t 30 -u 7 line || line='E it did not answer within 30 s'
  exec 7<&-
  rm -f -- "$fifo"
  if [[ $line != ready\\ * ]]; then
    kill -KILL "$!" 2>/dev/null
    printf 'E cannot make the namespaces of sandbox %s (unshare --pid --ipc --mount as root): %s\\n' "$1" "\${line#E }"
    return 1
  fi
  set -- "$1" $line
  printf '%s %s\\n' "$3" "$4" > "$ns_dir/$1.tmp" && mv -f -- "$ns_dir/$1.tmp" "$ns_dir/$1" || { printf 'E cannot record the namespaces of %s\\n' "$1"; kill -KILL "$3"; return 1; }
  holder_open "$1" || { printf 'E the namespaces of sandbox %s ended as they were made\\n' "$1"; return 1; }
  rm -f -- "$ns_dir/$1.stopped"
}
`;

/**
 * A root helper that runs `script` (its arguments: the account, then the rest) as root inside
 * account `$1`'s namespaces, where the pids the launcher reported mean what they meant there;
 * without a live holder there is nothing of the sandbox to look at, and `whenNone` runs instead.
 */
export function inSandboxNamespaces(script: string, whenNone: string): string {
  return `
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
${HOLDER_FUNCTIONS}
holder_open "$1" || { ${whenNone}; exit 0; }
exec nsenter --pid=/proc/self/fd/3 --mount=/proc/self/fd/4 --ipc=/proc/self/fd/5 -- /bin/bash --noprofile --norc -c ${shQuote(script)} berth-admin "$@"
`;
}
