import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it, onTestFinished } from 'vitest';
import type { ExecOnceResult, ShellTransport } from '../../src/shell/transport.js';
import type { BwrapSandbox } from '../../src/backends/bwrap/sandbox.js';
import { PersistentShell } from '../../src/shell/persistent-shell.js';
import { Warden } from '../../src/shell/warden.js';
import { collect, describeBwrap, PATH_ENV, sh, tempRoot, testRange, testSandbox } from '../helpers/bwrap.js';

/*
 * berth's shared shell plumbing (persistent shell, warden, kill-tree helper) over nothing but the
 * sandbox's spawn(argv, {env, cwd, stdin}): the one thing a backend has to give it. A timeout ends
 * the command's whole tree inside the sandbox's pid namespace and the shell goes on.
 */

const range = testRange();

/** What the seam will build from spawn: a bash on stdin/stdout in the sandbox. */
function transportOf(sb: BwrapSandbox, env: Readonly<Record<string, string>>, cwd: string): Promise<ShellTransport> {
  return sb.spawn(['/bin/bash', '--noprofile', '--norc'], { env, cwd, stdin: true }).then((p) => ({
    stdin: p.stdin!,
    stdout: p.stdout,
    stderr: p.stderr,
    exited: p.exited,
    kill: () => p.kill(),
  }));
}

function execOnceOf(sb: BwrapSandbox): (argv: string[]) => Promise<ExecOnceResult> {
  return async (argv) => {
    const r = await collect(await sb.spawn(argv, { env: PATH_ENV, stdin: false, cwd: '/' }));
    return { exitCode: r.code ?? 137, stdout: Buffer.from(r.stdout), stderr: Buffer.from(r.stderr) };
  };
}

async function shellIn(sb: BwrapSandbox): Promise<PersistentShell> {
  const spill = mkdtempSync(join(tmpdir(), 'berth-bwrap-spill-'));
  const warden = new Warden({ open: () => transportOf(sb, PATH_ENV, '/'), mayKillAll: true, label: 'bwrap-test' });
  await warden.start();
  const shell = await PersistentShell.start({
    open: (extra) => transportOf(sb, { ...PATH_ENV, HOME: '/home/sandbox', ...extra }, '/workspace'),
    execOnce: execOnceOf(sb),
    killer: warden,
    stateDir: '/home/sandbox/.berth',
    shellId: 'test',
    defaultCwd: '/workspace',
    secretNames: [],
    spillDir: spill,
    maxOutputChars: 100_000,
  });
  onTestFinished(async () => {
    await shell.close();
    await warden[Symbol.asyncDispose]();
    rmSync(spill, { recursive: true, force: true });
  });
  return shell;
}

describeBwrap('berth persistent shell in a bwrap sandbox', (host) => {
  it('keeps cwd and exported env between commands', async () => {
    const { sb } = await testSandbox(host, tempRoot(), range, 's');
    const shell = await shellIn(sb);
    await shell.run('mkdir -p /workspace/sub && cd /workspace/sub && export KEPT=yes', { timeoutMs: 10_000 });
    const r = await shell.run('pwd; echo $KEPT', { timeoutMs: 10_000 });
    expect(r.stdout).toBe('/workspace/sub\nyes\n');
    expect(r.exitCode).toBe(0);
  });

  it('on timeout ends the whole tree of the command, escaped ones too, and the shell goes on', async () => {
    const { sb } = await testSandbox(host, tempRoot(), range, 's');
    const shell = await shellIn(sb);
    const r = await shell.run('sleep 401 & (setsid sleep 402 >/dev/null 2>&1 &); sleep 403', { timeoutMs: 1500 });
    expect(r.timedOut).toBe(true);
    expect(r.exitCode).toBe(124);
    const left = await sh(sb, 'ps -eo args=');
    expect(left.stdout).not.toMatch(/sleep 40[123]/);
    expect((await shell.run('echo after', { timeoutMs: 10_000 })).stdout).toBe('after\n');
  });
});
