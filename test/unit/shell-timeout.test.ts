import { readFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { PersistentShell } from '../../src/shell/persistent-shell.js';
import { KILL_TREE_SCRIPT } from '../../src/shell/kill-tree.js';
import { execOnceLocal, killAll, makeFixture, pidsWithArg, type Fixture } from './shell-local-transport.js';

const T = { timeoutMs: 10_000 };
const FAST = { snapshotGraceMs: 1_500 };

/** Unique sleep durations per run so the /proc lookups cannot see another test's processes. */
const unique = (base: number): string => `${base}.${process.pid}${Math.floor(Math.random() * 1000)}`;

describe('PersistentShell timeouts (real bash, real processes)', () => {
  let fx: Fixture;
  const shells: PersistentShell[] = [];
  const leftovers: string[] = [];

  beforeEach(() => {
    fx = makeFixture();
  });
  afterEach(async () => {
    for (const sh of shells.splice(0)) await sh.close();
    for (const arg of leftovers.splice(0)) killAll(pidsWithArg(arg));
    fx.cleanup();
  });

  it('kills the command tree (pipe holders, setsid escapees) but not earlier jobs or other shells; a new shell takes over', async () => {
    const sh = await PersistentShell.start(fx.options(), FAST);
    const other = await PersistentShell.start(fx.options({ shellId: 'other' }), FAST);
    shells.push(sh, other);
    const earlier = unique(40);
    const foreign = unique(41);
    const [grand, escaped, fg] = [unique(30), unique(60), unique(31)];
    leftovers.push(earlier, foreign, grand, escaped, fg);

    await sh.run(`sleep ${earlier} &`, T);
    expect(sh.backgroundJobCount()).toBe(1);
    await other.run(`sleep ${foreign} &`, T);
    // A job's fork returns before its exec: until then /proc shows bash, not `sleep <arg>`.
    await vi.waitFor(() => expect([pidsWithArg(earlier), pidsWithArg(foreign)]).toEqual([[expect.any(Number)], [expect.any(Number)]]), { timeout: 5_000 });
    await sh.run('cd /tmp; export KEEP=kept', T);

    // The timeout leaves room for the whole line to start first on a loaded host.
    const r = await sh.run(`echo partial; (sleep ${grand} &); setsid sleep ${escaped} & sleep ${fg}`, { timeoutMs: 2_000 });
    expect(r.exitCode).toBe(124);
    expect(r.timedOut).toBe(true);
    expect(r.stdout).toBe('partial\n');
    // Nothing more of a timed-out line may run, so the shell ends after its trap saved the state.
    expect(r.shellReplaced).toBe(true);
    expect(r.stderr).toContain("berth: timed out after 2000 ms; the command's processes were killed and a new shell took over in /tmp " +
      'with the exported variables, functions and aliases of the old one (unexported variables, shell options and traps are not kept); ' +
      "1 background job(s) of earlier commands keep running, outside the new shell's job table\n");
    expect(r.cwd).toBe('/tmp');
    // It did not wait for the sleeps (each 30 s or more).
    expect(r.durationMs).toBeLessThan(30_000);

    expect(pidsWithArg(grand)).toEqual([]);
    expect(pidsWithArg(escaped)).toEqual([]);
    expect(pidsWithArg(fg)).toEqual([]);
    expect(pidsWithArg(earlier)).toHaveLength(1);
    expect(pidsWithArg(foreign)).toHaveLength(1);

    const after = await sh.run('echo "$KEEP"; pwd; sleep 0.05', T);
    expect(after.stdout).toBe('kept\n/tmp\n');
    expect(after.stderr).toBe('');
    // The earlier job runs on (checked above) but belongs to the old shell's job table.
    expect(sh.backgroundJobCount()).toBe(0);
    expect((await other.run('echo other-ok', T)).stdout).toBe('other-ok\n');
  });

  it('kills the later commands of a script too, and the shell stays consistent', async () => {
    const sh = await PersistentShell.start(fx.options(), FAST);
    shells.push(sh);
    const a = unique(32);
    const b = unique(33);
    leftovers.push(a, b);
    await sh.run('export KEEP2=yes; cd /usr', T);
    // After the first kill bash goes on with the script: either the next sleeps are killed as
    // they start, or the shell does not answer in time and is replaced. Both end every process.
    const r = await sh.run(`x=$(sleep ${a}); sleep ${b}; sleep ${b}; sleep ${b}; sleep ${b}`, { timeoutMs: 500 });
    expect(r.exitCode).toBe(124);
    expect(r.timedOut).toBe(true);
    expect(pidsWithArg(a)).toEqual([]);
    expect(pidsWithArg(b)).toEqual([]);
    const after = await sh.run('echo $KEEP2; pwd', T);
    expect(after.stdout).toBe('yes\n/usr\n');
  });

  it('replaces a shell stuck in a builtin loop and restores cwd, env, functions and aliases', async () => {
    const sh = await PersistentShell.start(fx.options(), FAST);
    shells.push(sh);
    await sh.run(`cd /usr; export LOOPV=v1; lf() { echo lf-ok; }; alias la='echo la-ok'`, T);
    // The timeout leaves room for `echo spinning` to run first on a loaded host.
    const r = await sh.run('echo spinning; while :; do :; done', { timeoutMs: 2_000 });
    expect(r.exitCode).toBe(124);
    expect(r.timedOut).toBe(true);
    expect(r.shellReplaced).toBe(true);
    expect(r.stdout).toBe('spinning\n');
    expect(r.cwd).toBe('/usr');
    const after = await sh.run('echo $LOOPV; lf; la; pwd', T);
    expect(after.stdout).toBe('v1\nlf-ok\nla-ok\n/usr\n');
    expect(after.shellReplaced).toBeUndefined();
  });

  it('the kill helper is plain POSIX sh (dash and busybox parse it)', async () => {
    for (const sh of [['dash'], ['busybox', 'sh']]) {
      const r = await execOnceLocal([...sh, '-n', '-c', KILL_TREE_SCRIPT]).catch(() => undefined);
      if (r === undefined) continue; // that shell is not installed here
      expect(r.stderr.toString()).toBe('');
      expect(r.exitCode).toBe(0);
    }
    expect(readFileSync('/proc/self/stat', 'utf8')).toMatch(/\) [A-Z] /);
  });
});
