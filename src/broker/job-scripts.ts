import { KILL_TREE_SCRIPT } from '../shell/kill-tree.js';
import { TAG_VAR } from '../shell/protocol.js';

/*
 * What a background job is inside its sandbox. A job is a detached process tree started through
 * the call's persistent shell (so it gets the shell's cwd, exported env and granted secrets, which
 * travel through the API env as for any command, never on argv). Everything about the job lives
 * in the sandbox under `<stateDir>/jobs/<id>/`:
 *   cmd   the command line (written from the command's stdin, so it is on no argv either)
 *   out   stdout and stderr interleaved, read from a byte offset
 *   pid   the wrapper's pid, written before `jobs.start` returns
 *   exit  the exit code, written atomically once the command ended
 * Every process of the job carries `BERTH_CMD_TAG=job-<id>` in its environment, so a kill finds
 * the whole tree (also what escaped with setsid) and nothing else: the kill-tree helper of the
 * shell protocol, aimed at the job's wrapper. Where the sandbox has the kernel's grouping, the
 * start line runs in a process group named after the job (`jobGroup`), which keeps the job once
 * the line ends: the kill ends that group first, so what shed the tag with `env -i` ends too.
 */

/** How long the start line waits for the wrapper to record its pid. */
const PID_WAIT_TENTHS = 50;

/** The environment tag every process of job `id` carries. */
export function tagOf(id: string): string {
  return `job-${id.slice('job_'.length)}`;
}

/** The name of the process group a job runs in (where the sandbox has the kernel's grouping). */
export function jobGroup(id: string): string {
  return tagOf(id);
}

/**
 * Starts the wrapper fully detached (`( ... & )` reparents it to init, `setsid` gives it its own
 * session) with no fd on the shell's pipes, then waits for its pid file so a read right after the
 * start never sees a job with no pid. `$0` of the wrapper is the job dir.
 */
export function startLine(dir: string, tag: string): string {
  const wrapper = 'd=$0; echo $$ > "$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid"; bash "$d/cmd" < /dev/null > "$d/out" 2>&1; ' +
    'c=$?; echo "$c" > "$d/exit.tmp"; mv "$d/exit.tmp" "$d/exit"';
  // One compound command and no `exit`: this runs in the persistent shell itself.
  return `if mkdir -p ${dir} && cat > ${dir}/cmd && : > ${dir}/out; then ` +
    `( ${TAG_VAR}=${tag} setsid bash -c '${wrapper}' ${dir} < /dev/null > /dev/null 2>&1 & ); ` +
    `__bj=0; while [ ! -s ${dir}/pid ] && [ "$__bj" -lt ${PID_WAIT_TENTHS * 10} ]; do sleep 0.01; __bj=$((__bj + 1)); done; unset __bj; ` +
    `[ -s ${dir}/pid ]; else false; fi`;
}

/**
 * Status and output in one helper run (`sh -c READ_SCRIPT sh DIR OFFSET MAX TAG`): a header line
 * `ok <exit|-> <alive 0|1> <size>` (or `missing`), then up to `max` bytes of output from `off`.
 * The exit file is read before the output, so once it is there the bytes read after it are complete.
 */
export const READ_SCRIPT = `
d=$1; off=$2; max=$3; tag=$4
[ -d "$d" ] || { echo missing; exit 0; }
code=; [ -f "$d/exit" ] && read -r code < "$d/exit"
alive=0
if [ -z "$code" ] && [ -f "$d/pid" ]; then
  read -r p < "$d/pid"
  grep -z -x -q -s -F "${TAG_VAR}=$tag" "/proc/$p/environ" 2>/dev/null && alive=1
  # The wrapper records the exit before it ends: one that ended since the first look left it.
  [ "$alive" = 0 ] && [ -f "$d/exit" ] && read -r code < "$d/exit"
fi
size=$(wc -c < "$d/out" 2>/dev/null) || size=0
echo "ok \${code:--} $alive $size"
if [ "$max" -gt 0 ]; then tail -c +$((off + 1)) "$d/out" 2>/dev/null | head -c "$max"; fi
exit 0
`;

/**
 * Kills the wrapper first (so it cannot record an exit code for a killed job), then runs the
 * shell protocol's kill-tree helper aimed at the dead wrapper: every process carrying the job's
 * tag, their descendants and their process groups. A pid that cannot exist stands in when the
 * wrapper never recorded one, so the helper's "children of the shell" rule matches nothing.
 */
const KILL_PRELUDE = `
jd=$1; tag=$2
p=4194304
if [ -f "$jd/pid" ]; then read -r p < "$jd/pid"; fi
if grep -z -x -q -s -F "${TAG_VAR}=$tag" "/proc/$p/environ" 2>/dev/null; then kill -KILL "$p" 2>/dev/null; fi
set -- "$p" "$tag"
`;

/**
 * The kill of a job's tree (`sh -c KILL_SCRIPT sh DIR TAG`): prints how many processes it killed,
 * then `exited` when the job had ended on its own first. The helper's variables never clash with `jd`.
 */
export const KILL_SCRIPT = `${KILL_PRELUDE}\n${KILL_TREE_SCRIPT}\n[ -f "$jd/exit" ] && echo exited\nexit 0\n`;
