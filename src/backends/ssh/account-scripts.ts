import { ACCOUNT_NAME_PATTERN } from './account-name.js';
import { CGROUP_END, CGROUP_FUNCTIONS, CGROUP_PROBE } from './cgroup-scripts.js';
import { HOLDER_FUNCTIONS } from './namespaces.js';
import { NEXT_UID, SANDBOX_UID_MAX, SANDBOX_UID_MIN } from './uid-range.js';

/*
 * Root helpers for sandbox accounts, run by accounts.ts through the pool (remote-exec.ts). Their
 * arguments are account names, paths, installation ids and digests: never secrets. Each prints
 * one result line; a refusal is `E <why>` with exit 125.
 */

export const PREAMBLE = `
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
die() { printf 'E %s\\n' "$*"; exit 125; }
records=/var/lib/berth/accounts
valid() { [[ $1 =~ ${ACCOUNT_NAME_PATTERN} ]] || die "$1 is not an account berth makes"; }
# useradd/userdel take a lock on /etc/passwd; another berth (or admin) may hold it for a moment.
retry_locked() {
  local i out rc
  for ((i = 0; i < 50; i++)); do
    out=$("$@" 2>&1); rc=$?
    if (( rc == 0 )) || [[ $out != *lock* ]]; then printf '%s' "$out"; return $rc; fi
    sleep 0.1
  done
  printf '%s' "$out"; return $rc
}
# Ends every process of uid $1, adding the count to k: each is stopped as soon as it is seen,
# rounds repeat until none is left (forks, setsid and emptied environments do not leave a uid).
kill_uid() {
  local round d l p ru key v T
  for ((round = 0; round < 200; round++)); do
    T=()
    for d in /proc/[0-9]*; do
      # Zombies are dead already (their parent, or init, reaps them); a signal to one "succeeds".
      { read -r l < "$d/stat"; } 2>/dev/null || continue
      [[ \${l##*) } == Z* ]] && continue
      ru=
      { while read -r key v _; do [[ $key == Uid: ]] && { ru=$v; break; }; done < "$d/status"; } 2>/dev/null
      [[ $ru == "$1" ]] || continue
      p=\${d#/proc/}
      kill -STOP "$p" 2>/dev/null
      T+=("$p")
    done
    (( \${#T[@]} )) || break
    for p in "\${T[@]}"; do kill -KILL "$p" 2>/dev/null && k=$((k + 1)); done
  done
}
# What uid $1 may have left in the host's shared places, its processes ended: files in the temp
# dirs anyone may write, SysV IPC objects it owns or made, POSIX message queues. Its sandbox's
# namespaces kept its own such things from the host's (they ended with its holder); this is for
# what ran outside them (an account of an earlier berth). Its uid is never given out again anyway.
clean_uid() {
  local f kind flag ui ci F
  find /tmp /var/tmp /dev/shm /run/lock /var/lock /dev/mqueue -xdev -uid "$1" -delete 2>/dev/null
  for f in shm:m:7:9 sem:s:4:6 msg:q:7:9; do
    IFS=: read -r kind flag ui ci <<< "$f"
    {
      while read -r -a F; do
        [[ \${F[1]-} =~ ^[0-9]+$ ]] || continue
        [[ \${F[$ui]} == "$1" || \${F[$ci]} == "$1" ]] && ipcrm "-$flag" "\${F[1]}"
      done < "/proc/sysvipc/$kind"
    } 2>/dev/null
  done
  # Message queues are seen only through an mqueue mount: one of its own, in a mount namespace of its own.
  local dev at fs mq=0
  while read -r dev at fs _; do [[ $at == /dev/mqueue && $fs == mqueue ]] && mq=1; done < /proc/mounts
  if (( ! mq )); then
    unshare --mount --propagation private -- /bin/bash --noprofile --norc -c 'mount -t mqueue berth-mqueue "$1" && find "$1" -mindepth 1 -uid "$2" -delete' berth-mq "$ns_dir" "$1" 2>/dev/null
  fi
}
${HOLDER_FUNCTIONS}
${CGROUP_FUNCTIONS}
${CGROUP_END}
${NEXT_UID}
`;

/**
 * With an installation given (`$inst`), an account whose record names another installation is
 * refused before anything of it is touched: a tampered or foreign ref never reaches a neighbour's
 * sandbox on a shared host.
 */
export const OWNED = `if [[ -n $inst && -f $records/$n ]] && ! grep -qxF "installation=$inst" "$records/$n"; then die "account $n belongs to another berth installation"; fi`;

/**
 * Ends every process of account `$n` (never uid 0): those of its uid, counted in `k`, then its
 * namespaces' holder (root's), with which anything left in them ends, then its cgroups (whatever
 * is left in them, and the groups themselves). Leaves its uid in `u`
 * (empty when the account is gone). Shared by stop and remove; the account's lock
 * (holder_lock) is held.
 */
export const END_PROCESSES = `k=0
u=$(getent passwd "$n" | cut -d: -f3)
if [[ -n $u ]]; then
  [[ $u != 0 ]] || die "account $n has uid 0"
  kill_uid "$u"
fi
holder_stop "$n"
# A group that would not empty in time (a process in uninterruptible sleep) stays, empty later.
cg_end "$n" || true`;

/**
 * Deletes account `$n` (uid `$u`, its processes ended) with its home under `$root`, what it left
 * in the host's shared places (clean_uid), its cron and mail spool, its record and its namespaces'
 * record. Shared by remove and a fresh ensure (which goes on holding the account's lock).
 */
const DELETE_ACCOUNT = `h=$root/$n
if [[ -d $h && ! -L $h ]]; then rm -rf --one-file-system -- "$h" || die "cannot remove $h"; fi
if [[ -n $u ]]; then
  clean_uid "$u"
  rm -f -- "/var/spool/cron/crontabs/$n" "/var/mail/$n" "/var/spool/mail/$n"
  # 8: userdel still sees a process of the account: a zombie init has not reaped yet.
  for ((i = 0; i < 100; i++)); do
    out=$(retry_locked userdel -- "$n")
    rc=$?
    (( rc == 8 )) || break
    sleep 0.1
  done
  # 6: no such user (removed meanwhile).
  (( rc == 0 || rc == 6 )) || die "userdel $n failed ($rc): $out"
  getent group "$n" >/dev/null && retry_locked groupdel -- "$n" >/dev/null
fi
rm -f -- "$records/$n" "$ns_dir/$n" "$ns_dir/$n.tmp" "$ns_dir/$n.fifo" "$ns_dir/$n.stopped"`;

/**
 * What the host offers: one `key value` line each. `missing namespaces`: root could not make the
 * PID, IPC and mount namespaces a sandbox runs in, with a /proc and a tmpfs of their own.
 */
export const PROBE_SCRIPT = `
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
printf 'uid %s\\n' "$EUID"
printf 'bash %s.%s\\n' "\${BASH_VERSINFO[0]}" "\${BASH_VERSINFO[1]}"
for t in useradd userdel groupadd getent setpriv find rm mkdir mkfifo chown chmod stat tar unshare nsenter setsid flock mount ipcrm; do
  command -v "$t" >/dev/null 2>&1 || printf 'missing %s\\n' "$t"
done
if command -v setpriv >/dev/null 2>&1 && ! setpriv --help 2>/dev/null | grep -q -- --no-new-privs; then printf 'missing setpriv-nnp\\n'; fi
if command -v nsenter >/dev/null 2>&1 && ! nsenter --help 2>/dev/null | grep -q -- --no-fork; then printf 'missing nsenter-no-fork\\n'; fi
if command -v unshare >/dev/null 2>&1; then
  if ! unshare --help 2>/dev/null | grep -q -- --kill-child; then printf 'missing unshare-kill-child\\n'
  elif ! unshare --pid --fork --kill-child --ipc --mount --propagation private -- /bin/bash --noprofile --norc -c \\
    'mount -t proc -o nosuid,nodev,noexec proc /proc && mount -t tmpfs -o size=1m berth-probe /tmp' >/dev/null 2>&1; then
    printf 'missing namespaces\\n'
  fi
fi
[ -r /proc/self/status ] || printf 'missing proc\\n'
${CGROUP_PROBE}
`;

/**
 * Create-or-adopt. Arguments: name, home root, installation, digest, ephemeral (0/1), fresh (1:
 * an existing account of this name is deleted first, with its processes and files). Prints
 * `account NAME UID GID HOME MADE` (MADE 1: this run created the account). A new account gets a
 * uid no account had before (uid-range.ts) and a group of the same number; creating it holds the
 * account's lock, so two berths making the same account do not race. The home root is root's and 0711 (others pass through to their own
 * home but cannot list the names); the home is created by root only when it does not exist (no
 * agent can have planted anything in it yet); the dirs inside it are made by the account itself,
 * so a link it planted there can only mislead itself, never a root process.
 */
export const ENSURE_SCRIPT = `${PREAMBLE}
n=$1 root=$2 inst=$3 dig=$4 eph=$5 fresh=\${6:-0}
valid "$n"
[[ $root == /* && $root != / ]] || die "home root $root must be an absolute directory other than /"
umask 022
mkdir -p -- "$root" "$records" "$ns_dir" "$uid_dir" || die "cannot create $root, $records, $ns_dir or $uid_dir"
[[ -d $root && ! -L $root ]] || die "home root $root is not a directory"
[[ $(stat -c %u -- "$root") == 0 ]] || die "home root $root is not owned by root"
chmod 0711 -- "$root" && chmod 0700 -- "$records" "$ns_dir" "$uid_dir" || die "cannot set the modes of $root, $records, $ns_dir and $uid_dir"
holder_lock "$n" || die "cannot take the lock of account $n in $ns_dir"
rec=$records/$n
if [[ -f $rec ]] && ! grep -qxF "installation=$inst" "$rec"; then die "account $n belongs to another berth installation"; fi
if [[ $fresh == 1 ]] && getent passwd "$n" >/dev/null; then
  ${END_PROCESSES.replace(/\n/g, '\n  ')}
  ${DELETE_ACCOUNT.replace(/\n/g, '\n  ')}
fi
made=0
if ! getent passwd "$n" >/dev/null; then
  # A group of the name without its account is left from a creation cut short: its gid goes with it.
  if getent group "$n" >/dev/null; then retry_locked groupdel -- "$n" >/dev/null || die "cannot remove the leftover group $n"; fi
  for ((try = 0; try < 5 && made == 0; try++)); do
    next_uid
    case $? in
      0) ;;
      2) die "no uid is left in berth's range ${SANDBOX_UID_MIN}-${SANDBOX_UID_MAX} on this host; remove the berth-* accounts there and the high-water mark $uid_mark" ;;
      *) die "cannot take a uid: $uid_dir/lock or $uid_mark is not usable" ;;
    esac
    # 4: the id was taken meanwhile by someone other than berth: the next one.
    out=$(retry_locked groupadd --gid "$uid" -- "$n"); rc=$?
    (( rc == 4 )) && continue
    (( rc == 0 )) || die "groupadd $n failed ($rc): $out"
    out=$(retry_locked useradd --no-create-home --no-log-init --home-dir "$root/$n" --shell /usr/sbin/nologin --uid "$uid" --gid "$uid" --comment 'berth sandbox' -- "$n"); rc=$?
    if (( rc == 0 )); then made=1; break; fi
    retry_locked groupdel -- "$n" >/dev/null
    (( rc == 4 )) || die "useradd $n failed ($rc): $out"
  done
  (( made )) || die "cannot create account $n: each uid it took was taken meanwhile"
fi
IFS=: read -r _ _ u g _ h _ < <(getent passwd "$n")
[[ $u =~ ^[0-9]+$ && $u != 0 && $h == "$root/$n" ]] || die "account $n is not a berth sandbox account (uid $u, home $h)"
if [[ ! -e $h && ! -L $h ]]; then mkdir -m 0700 -- "$h" && chown "$u:$g" -- "$h" || die "cannot create home $h"; fi
[[ -d $h && ! -L $h ]] || die "home $h is not a directory"
[[ $(stat -c '%u %a' -- "$h") == "$u 700" ]] || { chown -h "$u:$g" -- "$h" && chmod 0700 -- "$h"; } || die "cannot fix the owner and mode of $h"
env -i "$(command -v setpriv)" --reuid="$u" --regid="$g" --clear-groups --no-new-privs -- /bin/mkdir -p -m 0700 -- "$h/workspace" "$h/tmp" "$h/.berth" \\
  || die "account $n cannot create its dirs in $h"
printf 'installation=%s\\ndigest=%s\\nephemeral=%s\\n' "$inst" "$dig" "$eph" > "$rec.tmp" && mv -f -- "$rec.tmp" "$rec" || die "cannot write $rec"
printf 'account %s %s %s %s %s\\n' "$n" "$u" "$g" "$h" "$made"
`;

/**
 * Remove. Arguments: name, home root, installation (optional: see OWNED). Ends every process of
 * the account (kill_uid, then its namespaces' holder), deletes its home, what it left in the
 * shared temp dirs and IPC (clean_uid), its cron and mail spool, the account, its record and its
 * namespaces' files. Gone already is success. Prints `removed NAME KILLED`.
 */
export const REMOVE_SCRIPT = `${PREAMBLE}
n=$1 root=$2 inst=\${3-}
valid "$n"
${OWNED}
holder_lock "$n" || die "cannot take the lock of account $n in $ns_dir"
${END_PROCESSES}
${DELETE_ACCOUNT}
# Last, still held: a spawn waiting for it finds the file gone, takes a new one, and no account.
rm -f -- "$ns_dir/$n.lock"
printf 'removed %s %s\\n' "$n" "$k"
`;

/**
 * Stop a sandbox (idle, persistent): end every process of the account (its namespaces go with
 * their holder, and their temp dirs: the next spawn makes them afresh), keep the account and its
 * home. Arguments: name, installation (optional: see OWNED). Prints `stopped NAME KILLED`; an
 * account that is gone has nothing to stop.
 */
export const STOP_SCRIPT = `${PREAMBLE}
n=$1 inst=\${2-}
valid "$n"
${OWNED}
holder_lock "$n" || die "cannot take the lock of account $n in $ns_dir"
${END_PROCESSES}
# Stopped (hibernated) until a spawn makes its namespaces again (holder_start removes the mark).
: > "$ns_dir/$n.stopped" || die "cannot mark $n stopped in $ns_dir"
printf 'stopped %s %s\\n' "$n" "$k"
`;

/**
 * List one installation's accounts. Argument: installation. Prints
 * `sandbox NAME DIGEST EPHEMERAL EXISTS PROCESSES HOME` per record of that installation (HOME `-`
 * when the account is gone).
 */
export const LIST_SCRIPT = `${PREAMBLE}
inst=$1
declare -A P=()
for d in /proc/[0-9]*; do
  ru=
  { while read -r key v _; do [[ $key == Uid: ]] && { ru=$v; break; }; done < "$d/status"; } 2>/dev/null
  [[ -n $ru ]] && P[$ru]=$(( \${P[$ru]:-0} + 1 ))
done
shopt -s nullglob
for rec in "$records"/berth-*; do
  n=\${rec##*/}
  [[ $n =~ ${ACCOUNT_NAME_PATTERN} ]] || continue
  i= dig= eph=0
  while IFS='=' read -r key v; do
    case $key in installation) i=$v ;; digest) dig=$v ;; ephemeral) eph=$v ;; esac
  done < "$rec"
  [[ $i == "$inst" ]] || continue
  IFS=: read -r _ _ u _ _ h _ < <(getent passwd "$n")
  ex=0 np=0 up=0
  if [[ -n $u ]]; then ex=1 np=\${P[$u]:-0}; fi
  # Up unless stopped (hibernated) and not spawned in since: a stop marks it, the next spawn's holder clears it.
  [[ -e $ns_dir/$n.stopped ]] || up=1
  printf 'sandbox %s %s %s %s %s %s %s\\n' "$n" "\${dig:--}" "$eph" "$ex" "$np" "$up" "\${h:--}"
done
`;
