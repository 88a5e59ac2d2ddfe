import { BerthError } from '../../errors.js';
import { SANDBOX_RUN } from './layout.js';

/*
 * The sandbox's first process: a small bash loop that starts every other process of the sandbox
 * (persistent shells, one-off helpers, tar) as its own descendants. A process started this way is
 * in all of the sandbox's namespaces (the same /tmp tmpfs, pid and network namespace) and carries
 * everything bwrap applied before it started the loop: the seccomp filter, no capabilities,
 * no_new_privs, no user namespaces. Entering the namespaces from outside (nsenter) would give
 * none of that, and a second bwrap cannot join a pid namespace made under --disable-userns.
 *
 * A started process's environment is exactly the one asked for, plus `SHLVL`, which bash exports
 * to every program it execs (a program that is bash adds `_` and `PWD` itself). (The loop's own
 * environment is what bwrap and bash put there: bwrap gets an empty one from berth and adds PWD;
 * bash adds SHLVL and OLDPWD. The loop un-exports those without forking.)
 *
 * Requests arrive on fd 3 as NUL-terminated fields (argv and environment values may hold any byte
 * but NUL), so values travel over a pipe and never on an argv; events leave on fd 4, one short line
 * each. Neither fd reaches a started program. Every started process is a job with its own process
 * group (set -m, which also keeps SIGINT from being ignored as it is for background jobs without
 * job control), watched by a wrapper subshell that reports its pid, waits for it and writes its
 * exit status to a FIFO of its own. That FIFO closes when the wrapper ends however it ends (berth's
 * warden may kill every process but the init loop), so a process never stays "running" for berth
 * after its watcher is gone.
 *
 *   spawn <id> <cwd> <stdin: pipe|null> <argc> <argv...> <envc> <NAME=value...>
 *       stdio are FIFOs <run>/<id>.0 .1 .2, the status FIFO <run>/<id>.3; berth made and opened
 *       them before asking.
 *       -> "P <id> <pid>" once it runs; then "<status>\n" on <id>.3 when it ended (128+n for
 *          signal n), or EOF alone if the wrapper was killed. The P line is written twice: by the
 *          process itself before its program runs (a program that kills its watcher at once, as
 *          the warden's sweep does, is still seen to start) and by the watcher (a process killed
 *          before it wrote its own is still seen to start and end). berth takes the first.
 *          "E <id> <what>" if it could not start (what: stdio, cwd, env).
 *   kill <pid> <signal>    signal the process group <pid> (the pid a P line gave).
 *
 * The loop runs with the agent's own privileges and the agent can write to its fds (through
 * /proc/<pid>/fd), so nothing it says is trusted beyond the sandbox: berth never signals a host pid
 * it learnt from here, and bounds what it reads (see init-channel.ts). EOF on fd 3 ends the loop,
 * and with it the sandbox.
 */
export const INIT_SCRIPT = `
exec 0</dev/null 1>/dev/null 2>/dev/null
for f in /proc/self/fd/*; do n=\${f##*/}; case $n in [0-4]|*[!0-9]*) ;; *) eval "exec $n>&-" ;; esac; done
export -n PWD SHLVL OLDPWD
set -m
d=${SANDBOX_RUN}
rd() { IFS= read -r -d '' "$1" <&3; }
run() {
  exec 3<&-
  set -m
  if [ "$sin" = pipe ]; then exec 5<"$d/$id.0" || { printf 'E %s stdio\\n' "$id" >&4; exit; }
  else exec 5</dev/null; fi
  exec 6>"$d/$id.1" 7>"$d/$id.2" 8>"$d/$id.3" || { printf 'E %s stdio\\n' "$id" >&4; exit; }
  cd -- "$cwd" 2>/dev/null || { printf 'E %s cwd\\n' "$id" >&4; exit; }
  for kv in "\${envv[@]}"; do export -- "$kv" 2>/dev/null || { printf 'E %s env\\n' "$id" >&4; exit; }; done
  { printf 'P %s %s\\n' "$id" "$BASHPID" >&4; exec 4>&- -- "\${argv[@]}"; } <&5 >&6 2>&7 5<&- 6>&- 7>&- 8>&- &
  p=$!
  exec 5<&- 6>&- 7>&-
  printf 'P %s %s\\n' "$id" "$p" >&4
  exec 4>&-
  wait "$p"
  printf '%s\\n' "$?" >&8
}
printf 'R\\n' >&4
while rd op; do
  case $op in
  spawn)
    rd id && rd cwd && rd sin && rd n || break
    argv=(); for ((i = 0; i < n; i++)); do rd a || break 2; argv+=("$a"); done
    rd n || break
    envv=(); for ((i = 0; i < n; i++)); do rd a || break 2; envv+=("$a"); done
    run &
    unset argv envv a
    ;;
  kill)
    rd pid && rd sig || break
    case $sig in KILL|TERM|INT|HUP) ;; *) continue ;; esac
    case $pid in ''|*[!0-9]*|0|1) continue ;; esac
    kill -s "$sig" -- "-$pid" 2>/dev/null || kill -s "$sig" -- "$pid" 2>/dev/null
    ;;
  esac
done
`;

/** Names bash will not export (readonly), so they can never reach a started process. */
const UNEXPORTABLE = new Set(['BASHOPTS', 'BASH_VERSINFO', 'EUID', 'PPID', 'SHELLOPTS', 'UID']);
const NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;

export interface SpawnRequest {
  id: string;
  cwd: string;
  stdin: 'pipe' | 'null';
  argv: readonly string[];
  env: Readonly<Record<string, string>>;
}

/** One request as the loop reads it: NUL-terminated fields. Refuses what no process can be given. */
export function encodeSpawn(req: SpawnRequest): Buffer {
  if (req.argv.length === 0) throw new BerthError('internal', 'spawn needs a program (argv is empty)');
  const fields = ['spawn', req.id, req.cwd, req.stdin, String(req.argv.length), ...req.argv];
  const env = Object.entries(req.env);
  for (const [name] of env) {
    if (!NAME_RE.test(name) || UNEXPORTABLE.has(name)) {
      throw new BerthError(
        'internal',
        `environment variable name ${JSON.stringify(name)} cannot be given to a process in a bwrap sandbox ` +
          '(names are letters, digits and _, not starting with a digit, and not one of bash\'s readonly variables); rename it',
      );
    }
  }
  fields.push(String(env.length), ...env.map(([k, v]) => `${k}=${v}`));
  return encodeFields(fields);
}

/** A kill request for the process group a P line named. */
export function encodeKill(pid: number, signal: 'KILL' | 'TERM' | 'INT' | 'HUP'): Buffer {
  return encodeFields(['kill', String(pid), signal]);
}

function encodeFields(fields: readonly string[]): Buffer {
  for (const f of fields) {
    if (f.includes('\0')) throw new BerthError('internal', 'a spawn argument or environment value contains a NUL byte, which no process can receive');
  }
  return Buffer.from(fields.map((f) => `${f}\0`).join(''), 'utf8');
}
