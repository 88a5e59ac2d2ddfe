import type { ShellTransport } from '../shell/transport.js';
import { isShellName, shQuote } from '../shell/protocol.js';

/**
 * Gives a bash that was attached before its sandbox had an owner (a warm-pool sandbox) the
 * environment its first shell must have, on its stdin, ahead of the shell's init: never on an
 * argv, and the init's first line re-executes bash, so the exported values are in the new bash's
 * own environment (`/proc/<pid>/environ`, where the warden finds the shell's tag) as if the exec
 * had been given them. The bash had nothing of anyone before (it was started with the sandbox's
 * base environment), so it holds only this session's env. Undefined when `env` cannot be written
 * as shell assignments (a name bash cannot export, a NUL byte): the caller opens a new process.
 */
export function withSessionEnv(shell: ShellTransport, env: Readonly<Record<string, string>>): ShellTransport | undefined {
  const entries = Object.entries(env);
  if (entries.some(([k, v]) => !isShellName(k) || v.includes('\0'))) return undefined;
  // Errors (a readonly name such as UID) are silenced: an exec's Env would not change those either.
  const preamble = entries.map(([k, v]) => `builtin export ${k}=${shQuote(v)} 2>/dev/null\n`).join('');
  if (preamble !== '') shell.stdin.write(preamble);
  return shell;
}
