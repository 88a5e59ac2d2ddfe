import { randomBytes } from 'node:crypto';
import { ConfigError } from '../../errors.js';
import { shQuote } from '../../shell/protocol.js';
import type { SpawnOptions } from '../backend.js';

/*
 * The pods/exec API takes only argv: no environment, no working directory. Putting env values
 * on argv would show them in the sandbox's /proc/<pid>/cmdline and in the API server's audit
 * log (the exec URL carries the command), so they travel on stdin instead:
 *
 *   argv:  /bin/sh -c BOOTSTRAP berth-spawn <p|n> <end token> <argv...>
 *   stdin: export NAME='value'        one per variable, single-quoted (values may hold newlines)
 *          cd -- '/dir' || exit ...   when a cwd is given
 *          <end token>
 *          ...the process's own stdin (mode p), or nothing (mode n: it gets /dev/null)
 *
 * The bootstrap reads lines with the `read` builtin, which takes one byte at a time from a pipe,
 * so not a byte past the end token is consumed; it `eval`s them (builtins only: nothing is
 * forked or exec'd with a value on its argv) and `exec`s the command, which keeps the pid and
 * has the variables in its own environment (/proc/<pid>/environ, where kill-by-tag finds it).
 * The token is random per spawn and checked against every prelude line, so a value can never
 * end the prelude early. Without the token (the stream ended) nothing is run.
 */

/** Exit status of the bootstrap when the prelude ended before its end token (nothing was run). */
export const PRELUDE_INCOMPLETE_EXIT = 125;
/** Exit status when the working directory could not be entered (nothing was run). */
export const CWD_MISSING_EXIT = 126;

const NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** POSIX sh: dash, busybox ash and bash all read a pipe one byte at a time in `read`. */
export const BOOTSTRAP_SCRIPT =
  'm=$1; t=$2; shift 2; s=; ' +
  'while IFS= read -r l; do ' +
  'if [ "$l" = "$t" ]; then eval "$s"; if [ "$m" = n ]; then exec "$@" </dev/null; fi; exec "$@"; fi; ' +
  's="$s$l\n"; done; ' +
  `echo 'berth: the spawn prelude ended before its end token; nothing was run' >&2; exit ${PRELUDE_INCOMPLETE_EXIT}`;

/**
 * A process to start: `cwd` undefined is the container's own (`workingDir`); with `stdin` the
 * process reads what the caller writes after the prelude, without it /dev/null.
 */
export interface SpawnRequest extends SpawnOptions {
  argv: readonly string[];
}

export interface SpawnPlan {
  /** What goes on the exec API's `command` (never a value of `env`). */
  command: string[];
  /** The first bytes written to the exec's stdin. */
  prelude: Buffer;
}

/**
 * The exec command and stdin prelude that run `req` with its env and cwd. Throws ConfigError
 * for a name that is not a shell variable name or a value holding a NUL byte (neither can be
 * put into a process environment).
 */
export function planSpawn(req: SpawnRequest, token: () => string = () => `--berth-end-${randomBytes(12).toString('hex')}`): SpawnPlan {
  if (req.argv.length === 0) throw new RangeError('spawn needs a command');
  const lines: string[] = [];
  for (const [name, value] of Object.entries(req.env)) {
    if (!NAME_RE.test(name)) throw new ConfigError(`environment name ${JSON.stringify(name)} is not a valid shell variable name; use letters, digits and _ only`);
    if (value.includes('\0')) throw new ConfigError(`the value of environment variable ${name} contains a NUL byte, which no process environment can hold`);
    lines.push(`export ${name}=${shQuote(value)}`);
  }
  if (req.cwd !== undefined) {
    const dir = shQuote(req.cwd);
    lines.push(`CDPATH= cd -- ${dir} 2>/dev/null || { printf 'berth: cannot enter working directory %s\\n' ${dir} >&2; exit ${CWD_MISSING_EXIT}; }`);
  }
  const body = lines.length === 0 ? '' : `${lines.join('\n')}\n`;
  let end = token();
  // A value may span lines; none of them may equal the end token, or the prelude would end early.
  while (body.split('\n').includes(end)) end = token();
  return {
    command: ['/bin/sh', '-c', BOOTSTRAP_SCRIPT, 'berth-spawn', req.stdin ? 'p' : 'n', end, ...req.argv],
    prelude: Buffer.from(`${body}${end}\n`, 'utf8'),
  };
}
