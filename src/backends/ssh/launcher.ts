import { UsageError } from '../../errors.js';
import { isShellName, shQuote } from '../../shell/protocol.js';
import { ACCOUNT_NAME_PATTERN } from './account-name.js';
import { CGROUP_FUNCTIONS, CGROUP_JOIN } from './cgroup-scripts.js';
import { HOLDER_FUNCTIONS, HOLDER_START, inSandboxNamespaces } from './namespaces.js';

/*
 * The remote side of a spawn: three small fixed bash scripts. Nothing secret is ever on a remote
 * argv (every user on the host can read /proc/PID/cmdline): the exec request carries only the
 * launcher text, the account name, the home root and two bounds; the cwd, the environment and the
 * argv travel on the channel's stdin, read by the last stage as the sandbox's account.
 *
 * Stage 1 runs as the login user (root) in the process sshd started, which sshd made a session
 * and process group leader. It finds the account in /etc/passwd (only `berth-<24 hex>` accounts
 * with their home under the root, never uid 0), hands the channel's pipes to it, finds (or makes)
 * the sandbox's namespace holder (namespaces.ts), joins the account's cgroup (cgroup-scripts.ts:
 * nothing the sandbox runs is outside it) and execs `nsenter --no-fork` into its PID,
 * mount and IPC namespaces, running the waiter with an EMPTY environment.
 *
 * The waiter, still root and still that pid, forks the command's process: the first of the
 * sandbox's PID namespace along this chain. It execs `setsid` (so the command leads its own
 * session and process group in the namespace, as the pid the launcher reports), then `setpriv` to
 * the account's uid and gid (no supplementary groups, no_new_privs, no inheritable capabilities),
 * under the process bound if asked, running stage 2. The waiter waits for it and ends as it did,
 * with its exit status or by its signal, so sshd reports what the command did. (nsenter's own
 * fork would not do: it stops itself whenever its child is stopped, and never reports an exit
 * after a warden's SIGSTOP and SIGCONT.) An exit status above 128 is reported as the signal
 * 128 + N, as a shell's `$?` would read it either way.
 *
 * Stage 2, as the account, reads the request from stdin: NUL-terminated fields (bash `read -d ''`
 * reads a pipe byte by byte, so nothing past the request is consumed)
 *   berth-spawn-1, cwd, tag, <n>, n × NAME=VALUE, <m>, m × argv word
 * enters the cwd (as the account, so permissions are the account's), exports its defaults,
 * BERTH_SPAWN_TAG and then the pairs with the `export` builtin (no process, no argv), prints
 * `berth-spawn <pid>` as the first line of stdout and execs the argv. That pid is the command's in
 * the sandbox's PID namespace: what `$$` says there, what the warden and the shell see, and what
 * the root helpers that take it (KILL_SCRIPT) look for after entering the namespace. Any refusal
 * is one line `E <why>` instead, exit 125.
 */

/** The first stdout line of a spawn that started. */
export const SPAWN_READY = 'berth-spawn';
/** Env var carrying the per-spawn tag, so the kill helper finds processes that left the session. */
const SPAWN_TAG_VAR = 'BERTH_SPAWN_TAG';
const MAGIC = 'berth-spawn-1';

/** PATH of the sandbox's processes unless the granted env sets one. */
const SANDBOX_PATH = '/usr/local/bin:/usr/bin:/bin';

/**
 * Stage 2. Its own names all start with `__bl_`, which granted env names may not (see
 * `encodeSpawnRequest`): an exported pair can then never change the cwd, the tag or the argv.
 * Only exported variables reach the command, so its own names need no unsetting.
 */
export const STAGE2_SCRIPT = `
set -u
__bl_n=$1 __bl_h=$2
__bl_r() { IFS= read -r -d '' "$1" || { builtin printf 'E the spawn request ended early\\n'; exit 125; }; }
__bl_r __bl_m; [[ $__bl_m == ${MAGIC} ]] || { builtin printf 'E not a berth spawn request\\n'; exit 125; }
__bl_r __bl_cwd; __bl_r __bl_tag; __bl_r __bl_c
[[ $__bl_c =~ ^[0-9]{1,5}$ ]] || { builtin printf 'E bad environment count\\n'; exit 125; }
__bl_e=()
for ((__bl_i = 0; __bl_i < __bl_c; __bl_i++)); do
  __bl_r __bl_kv
  [[ $__bl_kv =~ ^[A-Za-z_][A-Za-z0-9_]*= && $__bl_kv != __bl_* && $__bl_kv != ${SPAWN_TAG_VAR}=* ]] || { builtin printf 'E bad environment entry %d\\n' "$__bl_i"; exit 125; }
  __bl_e+=("$__bl_kv")
done
__bl_r __bl_c
[[ $__bl_c =~ ^[1-9][0-9]{0,4}$ ]] || { builtin printf 'E bad argv count\\n'; exit 125; }
__bl_a=()
for ((__bl_i = 0; __bl_i < __bl_c; __bl_i++)); do __bl_r __bl_w; __bl_a+=("$__bl_w"); done
CDPATH= builtin cd -- "$__bl_cwd" 2>/dev/null || { builtin printf 'E working directory %s does not exist or is not open to this sandbox\\n' "$__bl_cwd"; exit 125; }
builtin unset -v OLDPWD
builtin set -- "\${__bl_a[@]}"
builtin export HOME=$__bl_h USER=$__bl_n LOGNAME=$__bl_n SHELL=/bin/bash PATH=${SANDBOX_PATH} TMPDIR=$__bl_h/tmp ${SPAWN_TAG_VAR}=$__bl_tag
for __bl_kv in "\${__bl_e[@]}"; do builtin export "$__bl_kv"; done
builtin printf '${SPAWN_READY} %d\\n' "$$"
builtin exec -- "$@"
`;

/**
 * The waiter; its arguments: uid, gid, account, home, the process bound. It closes the holder's
 * namespace fds (the command must not hold them), sets the bound on itself (root is exempt from
 * it; the command inherits it) and gives the fork the channel's stdin (bash would give a
 * background job /dev/null). Core dumps are off for itself only: re-raising a signal such as
 * SIGSEGV must not leave a core of root's bash. After the fork its own stderr is /dev/null.
 */
const WAITER_SCRIPT = `
set -u
u=$1 g=$2 n=$3 h=$4 nproc=$5
exec 3<&- 4<&- 5<&-
(( nproc == 0 )) || ulimit -u "$nproc" || { printf 'E cannot set the process bound %s\\n' "$nproc"; exit 125; }
( exec -c setsid setpriv --reuid="$u" --regid="$g" --clear-groups --no-new-privs --inh-caps=-all -- /bin/bash --noprofile --norc -c ${shQuote(STAGE2_SCRIPT)} berth-sandbox "$n" "$h" ) <&0 &
ulimit -S -c 0
# bash reports a waited job's death by a signal ("... Killed") on its stderr, the channel's: after
# a kill the channel may be closed already, and that write would end the waiter by SIGPIPE instead
# of reporting the command's signal. The waiter has nothing more to say.
exec 2>/dev/null
wait "$!"
s=$?
# Signals that stop, continue or are ignored by default would not end the waiter: kept as a status.
if (( s > 128 )); then
  case $((s - 128)) in 17 | 18 | 19 | 20 | 21 | 22 | 23 | 28) ;; *) kill -n "$((s - 128))" "$$" 2>/dev/null ;; esac
fi
exit "$s"
`;

/**
 * Stage 1; its arguments: the account name, the root its home must be under, the most processes
 * the account may have at once (0: no bound), and the size in MiB of each of the sandbox's temp
 * dirs (used when its namespaces are made). The process bound is RLIMIT_NPROC, which the kernel
 * counts per uid: one account is one sandbox, so a fork bomb stops at the sandbox's bound.
 */
export const LAUNCHER_SCRIPT = `
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
n=$1 root=$2 nproc=$3 tmpmb=$4
[[ $nproc =~ ^[0-9]{1,7}$ ]] || { printf 'E bad process bound %s\\n' "$nproc"; exit 125; }
[[ $tmpmb =~ ^[1-9][0-9]{0,6}$ ]] || { printf 'E bad temp dir size %s\\n' "$tmpmb"; exit 125; }
[[ $n =~ ${ACCOUNT_NAME_PATTERN} ]] || { printf 'E %s is not an account berth makes\\n' "$n"; exit 125; }
u= g= h=
while IFS=: read -r a _ uu gg _ hh _; do
  if [[ $a == "$n" ]]; then u=$uu g=$gg h=$hh; break; fi
done < /etc/passwd
[[ -n $u ]] || { printf 'E no account %s on this host: the sandbox was removed\\n' "$n"; exit 125; }
[[ $u =~ ^[0-9]+$ && $u != 0 && $h == "$root/$n" ]] || { printf 'E account %s is not a berth sandbox account (uid %s, home %s)\\n' "$n" "$u" "$h"; exit 125; }
# sshd made the channel's pipes as root (mode 0600): hand them to the account, or it could not
# reopen its own stdin/stdout/stderr (/dev/stdin, /dev/stderr, /dev/fd/N) as programs often do.
fds=()
for f in 0 1 2; do [[ -p /proc/self/fd/$f ]] && fds+=("/proc/self/fd/$f"); done
(( \${#fds[@]} == 0 )) || chown -- "$u:$g" "\${fds[@]}" || { printf 'E cannot hand the channel to %s\\n' "$n"; exit 125; }
${HOLDER_FUNCTIONS}
${HOLDER_START}
if ! holder_open "$n"; then
  holder_lock "$n" || { printf 'E cannot lock the namespaces of sandbox %s\\n' "$n"; exit 125; }
  holder_open "$n" || holder_start "$n" "$tmpmb" || exit 125
  holder_unlock
fi
${CGROUP_FUNCTIONS}
${CGROUP_JOIN}
exec -c nsenter --no-fork --pid=/proc/self/fd/3 --mount=/proc/self/fd/4 --ipc=/proc/self/fd/5 -- /bin/bash --noprofile --norc -c ${shQuote(WAITER_SCRIPT)} berth-spawn "$u" "$g" "$n" "$h" "$nproc"
`;

/**
 * The stdin request stage 2 reads. Refuses what could not travel intact or would be misread:
 * NUL anywhere, env names that are not shell names, an empty argv, a relative cwd.
 */
export function encodeSpawnRequest(req: { cwd: string; tag: string; env: Readonly<Record<string, string>>; argv: readonly string[] }): Buffer {
  if (req.argv.length === 0) throw new UsageError('spawn needs a command (argv is empty)');
  if (!req.cwd.startsWith('/')) throw new UsageError(`the working directory "${req.cwd}" must be an absolute path on the host`);
  const fields: string[] = [MAGIC, req.cwd, req.tag];
  const names = Object.keys(req.env);
  fields.push(String(names.length));
  for (const name of names) {
    if (!isShellName(name)) throw new UsageError(`environment name "${name}" is not a valid shell variable name; use letters, digits and _ only`);
    if (name.startsWith('__bl_') || name === SPAWN_TAG_VAR) throw new UsageError(`environment name "${name}" is reserved for berth's SSH launcher; rename it`);
    fields.push(`${name}=${req.env[name] ?? ''}`);
  }
  fields.push(String(req.argv.length), ...req.argv);
  for (const f of fields) {
    if (f.includes('\0')) throw new UsageError('the command, its working directory or an environment value contains a NUL byte, which cannot be passed to a process');
  }
  return Buffer.from(fields.map((f) => `${f}\0`).join(''), 'utf8');
}

/**
 * Root helper ending one spawn's tree: every process of the account (and only of it) that is in
 * the spawn's session or process group, carries its tag, or descends from one of those. Each is
 * stopped as soon as it is found, so nothing forks past the scan; rounds repeat until a round
 * finds nothing new, then all are killed. Arguments: account, pid (= session), tag. Prints the
 * count. Builtins only in the loop (no process per /proc entry). It runs in the sandbox's
 * namespaces, where the pid and /proc are the ones the launcher reported from; a sandbox without
 * its holder has no process left to end.
 */
export const KILL_SCRIPT = inSandboxNamespaces(`
set -u
n=$1 sid=$2 tag=$3
u=
while IFS=: read -r a _ uu _; do [[ $a == "$n" ]] && { u=$uu; break; }; done < /etc/passwd
[[ -n $u && $u != 0 ]] || { echo 0; exit 0; }
declare -A T=()
for ((round = 0; round < 100; round++)); do
  new=0
  for d in /proc/[0-9]*; do
    p=\${d#/proc/}
    [[ -n \${T[$p]+x} ]] && continue
    { read -r l < "$d/stat"; } 2>/dev/null || continue
    r=\${l##*) }
    set -- $r
    [[ $1 == Z ]] && continue
    pp=$2 pg=$3 ss=$4 ru=
    { while read -r k v _; do [[ $k == Uid: ]] && { ru=$v; break; }; done < "$d/status"; } 2>/dev/null
    [[ $ru == "$u" ]] || continue
    hit=0
    if [[ $ss == "$sid" || $pg == "$sid" || $p == "$sid" || -n \${T[$pp]+x} ]]; then hit=1
    else
      { while IFS= read -r -d '' e; do [[ $e == "${SPAWN_TAG_VAR}=$tag" ]] && { hit=1; break; }; done < "$d/environ"; } 2>/dev/null
    fi
    (( hit )) || continue
    kill -STOP "$p" 2>/dev/null
    T[$p]=1
    new=1
  done
  (( new )) || break
done
k=0
for p in "\${!T[@]}"; do kill -KILL "$p" 2>/dev/null && k=$((k + 1)); done
echo "$k"
`, 'echo 0');
