import { spawn } from 'node:child_process';

/*
 * iptables and ip6tables, run with an argv (never a shell). `-w` waits for the xtables lock that
 * the legacy backend takes (the nf_tables one ignores it).
 */

export type Family = 'ipv4' | 'ipv6';

const BINARY: Readonly<Record<Family, string>> = { ipv4: 'iptables', ipv6: 'ip6tables' };
const RESTORE: Readonly<Record<Family, string>> = { ipv4: 'iptables-restore', ipv6: 'ip6tables-restore' };
const TIMEOUT_MS = 20_000;

export interface RunResult {
  ok: boolean;
  stdout: string;
  /** The first line of what it said on stderr (or why it did not run). */
  said: string;
  /** True when the binary is not installed. */
  missing: boolean;
}

/** The command line as an operator would type it (for messages: rules hold no secrets). */
export function shown(family: Family, args: readonly string[]): string {
  return [BINARY[family], ...args].join(' ');
}

/** `iptables -w <args>` (or ip6tables). Never throws: the result says what happened. */
export function iptables(family: Family, args: readonly string[]): Promise<RunResult> {
  return run(BINARY[family], ['-w', ...args]);
}

/**
 * `iptables-restore --noflush` with `input`: one transaction, so a chain it declares is replaced
 * whole and no reader sees it half filled.
 */
export function iptablesRestore(family: Family, input: string): Promise<RunResult> {
  return run(RESTORE[family], ['-w', '--noflush'], input);
}

function run(binary: string, args: readonly string[], input?: string): Promise<RunResult> {
  return new Promise((resolve) => {
    const child = spawn(binary, args, { stdio: ['pipe', 'pipe', 'pipe'], timeout: TIMEOUT_MS });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.stdin.on('error', () => undefined);
    child.stdin.end(input ?? '');
    child.once('error', (err: NodeJS.ErrnoException) => {
      resolve({ ok: false, stdout, said: err.code === 'ENOENT' ? `${binary} is not installed` : err.message, missing: err.code === 'ENOENT' });
    });
    child.once('close', (code, signal) => {
      const said = stderr.trim().split('\n')[0] ?? '';
      resolve({ ok: code === 0, stdout, said: said || (code === 0 ? '' : `exit ${signal ?? code}`), missing: false });
    });
  });
}
