import { spawn } from 'node:child_process';
import { chmodSync, existsSync, readdirSync, readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ShellTransport } from '../../src/shell/transport.js';
import { PersistentShell } from '../../src/shell/persistent-shell.js';
import { Warden } from '../../src/shell/warden.js';
import { makeFixture, openLocalBash, type Fixture } from './shell-local-transport.js';

/*
 * A fork bomb on a host backend, kept from endangering the machine: the shell runs as `nobody`
 * with RLIMIT_NPROC 100 (root ignores that limit, so a root shell could not be bounded), like a
 * container's pids limit. The warden runs as root, as berth's own user does on `local`.
 */
const NOBODY = 65534;
const NPROC = 100;
const canDrop = process.getuid?.() === 0 && existsSync('/usr/bin/setpriv') && existsSync('/usr/bin/prlimit');

function openAsNobody(env: Record<string, string>, cwd: string): Promise<ShellTransport> {
  const child = spawn('prlimit', [`--nproc=${NPROC}`, '--', 'setpriv', `--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', 'bash', '--noprofile', '--norc'], {
    stdio: ['pipe', 'pipe', 'pipe'], env, cwd,
  });
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code, signal) => resolve(code ?? (signal !== null ? 128 + (constants.signals[signal] ?? 0) : null)));
    child.once('error', () => resolve(null));
  });
  return Promise.resolve({
    stdin: child.stdin, stdout: child.stdout, stderr: child.stderr, exited,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  });
}

/** Live processes of `nobody` on this machine (zombies are dead). */
function nobodyProcesses(): number {
  let n = 0;
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const status = readFileSync(`/proc/${d}/status`, 'utf8');
      if (/^Uid:\s+65534\s/m.test(status) && !/^State:\s+Z/m.test(status)) n++;
    } catch {
      // gone meanwhile
    }
  }
  return n;
}

describe.skipIf(!canDrop)('a fork bomb on a host backend (shell as nobody, RLIMIT_NPROC 100; needs root, setpriv and prlimit)', () => {
  let fx: Fixture;
  let warden: Warden;
  let shell: PersistentShell | undefined;

  beforeEach(async () => {
    fx = makeFixture();
    chmodSync(fx.dir, 0o777);
    warden = new Warden({ open: () => openLocalBash({ PATH: process.env.PATH ?? '/usr/bin:/bin' }, fx.dir), mayKillAll: false });
    await warden.start();
  });
  afterEach(async () => {
    await shell?.close();
    await warden.close();
    fx.cleanup();
  });

  it('is ended at its timeout by the warden; the session works again and keeps its state', async () => {
    expect(nobodyProcesses()).toBe(0);
    const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: fx.dir, LANG: 'C.UTF-8' };
    shell = await PersistentShell.start(fx.options({ killer: warden, open: (extra) => openAsNobody({ ...env, ...extra }, fx.dir) }));
    await shell.run('export KEEP=kept; cd /tmp', { timeoutMs: 10_000 });
    const r = await shell.run('b(){ b|b& }; b; sleep 60', { timeoutMs: 3_000 });
    expect(r.exitCode).toBe(124);
    expect(r.stderr).toContain("berth: timed out after 3000 ms; the command's processes were killed and a new shell took over in /tmp " +
      'with the exported variables, functions and aliases of the old one');
    // Only the new shell is left of nobody's processes.
    expect(nobodyProcesses()).toBe(1);
    const after = await shell.run('echo "$KEEP"; ls / | wc -l', { timeoutMs: 10_000 });
    expect(after.exitCode, after.output).toBe(0);
    expect(after.stdout).toMatch(/^kept\n\d+\n$/);
  });
});
