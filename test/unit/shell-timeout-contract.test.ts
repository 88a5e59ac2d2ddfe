import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { ShellTransport } from '../../src/shell/transport.js';
import { PersistentShell } from '../../src/shell/persistent-shell.js';
import { WARDEN_SCRIPT, wardenLoop } from '../../src/shell/warden-script.js';
import { Warden, type ProcessKiller, type TimeoutReport, type TreeInput } from '../../src/shell/warden.js';
import { killAll, makeFixture, openLocalBash, pidsWithArg, type Fixture } from './shell-local-transport.js';

const T = { timeoutMs: 10_000 };

/** Unique sleep durations per run so the /proc lookups cannot see another test's processes. */
const unique = (base: number): string => `${base}.${process.pid}${Math.floor(Math.random() * 1000)}`;

/** A live process (zombies are dead: killed, only not reaped yet by whoever inherited them). */
function alive(pid: number): boolean {
  try {
    return !/\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/*
 * docs/design.md §5: after a timeout nothing more of that command line runs, the tree is gone when the
 * call returns, the session stays usable and the result says exactly what a new shell restored.
 * Run with the warden (what the broker gives every sandbox) and with the helper run through
 * execOnce (the fallback, and what a library user without a warden gets).
 */
for (const mode of ['warden', 'helper'] as const) {
  describe(`timeout contract (${mode}, real bash)`, () => {
    let fx: Fixture;
    let warden: Warden | undefined;
    const shells: PersistentShell[] = [];
    const leftovers: string[] = [];

    const start = async (): Promise<PersistentShell> => {
      const killer: ProcessKiller | undefined = warden;
      const sh = await PersistentShell.start(fx.options({ killer }));
      shells.push(sh);
      return sh;
    };

    beforeEach(async () => {
      fx = makeFixture();
      if (mode === 'warden') {
        const env = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
        warden = new Warden({ open: () => openLocalBash(env, fx.dir), mayKillAll: false });
        await warden.start();
        expect(await warden.pid()).toBeGreaterThan(0);
      }
    });
    afterEach(async () => {
      for (const sh of shells.splice(0)) await sh.close();
      await warden?.close();
      warden = undefined;
      for (const arg of leftovers.splice(0)) killAll(pidsWithArg(arg));
      fx.cleanup();
    });

    it('runs nothing more of a timed-out line, and a new shell carries the state on', async () => {
      const sh = await start();
      const marker = join(fx.dir, 'not-reached');
      const long = unique(304);
      leftovers.push(long);
      const old = Number((await sh.run('export KEEP=kept; kf() { echo kf-ok; }; cd /tmp; echo $$', T)).stdout);
      // The timeout leaves room for `echo partial` to run first on a loaded host.
      const r = await sh.run(`echo partial; sleep ${long}; echo not-reached; touch ${marker}`, { timeoutMs: 2_000 });
      expect(r.exitCode).toBe(124);
      expect(r.timedOut).toBe(true);
      expect(r.stdout).toBe('partial\n');
      expect(r.shellReplaced).toBe(true);
      expect(r.stderr).toMatch(/berth: timed out after 2000 ms; the command's processes were killed and a new shell took over in \/tmp with the exported variables, functions and aliases of the old one \(unexported variables, shell options and traps are not kept\)\n$/);
      // The sleep is killed and the shell that ran the line is gone: nothing is left to run the rest of it.
      expect(old).toBeGreaterThan(0);
      expect(alive(old)).toBe(false);
      expect(pidsWithArg(long).filter(alive)).toEqual([]);
      expect(existsSync(marker)).toBe(false);
      const after = await sh.run('echo "$KEEP"; kf; pwd', T);
      expect(after.stdout).toBe('kept\nkf-ok\n/tmp\n');
      expect(after.shellReplaced).toBeUndefined();
    });

    it('returns only once the whole tree is gone, background grandchildren included', async () => {
      const sh = await start();
      const pidfile = join(fx.dir, 'grandchild.pid');
      const [grand, fg] = [unique(300), unique(301)];
      leftovers.push(grand, fg);
      // The timeout leaves room for the grandchild to start and be written down first on a loaded host.
      const r = await sh.run(`(sleep ${grand} & echo $! > ${pidfile}; wait) & sleep ${fg}`, { timeoutMs: 2_000 });
      expect(r.exitCode).toBe(124);
      const pid = Number(readFileSync(pidfile, 'utf8'));
      expect(pid).toBeGreaterThan(0);
      expect(alive(pid)).toBe(false);
      expect(pidsWithArg(grand).filter(alive)).toEqual([]);
      expect(pidsWithArg(fg).filter(alive)).toEqual([]);
      expect((await sh.run('echo ok', T)).stdout).toBe('ok\n');
    });

    it('believes the backend, not the shell, about the shell\'s pid: a snapshot that makes it report another process\'s gets that process no signal', async () => {
      const decoyArg = unique(303);
      leftovers.push(decoyArg);
      const decoy = spawn('sleep', [decoyArg], { stdio: 'ignore', detached: true });
      decoy.unref();
      const sh = await start();
      // Every `builtin X` of berth's goes through it once a new shell sources the snapshot: only the
      // init's trailer, which carries `$$`, is changed, to the decoy's pid.
      await sh.run(`export DECOY=${decoy.pid}; builtin() { if [ "$1" = printf ] && [ "$2" = '%s~%d %s%s~' ] && [ "$4" = "$$" ]; ` +
        'then command builtin printf "$2" "$3" "$DECOY" "$5" "$6"; else command builtin "$@"; fi; }', T);
      // The first timeout replaces the shell with one that lies; the second ends a command of that one.
      expect((await sh.run('sleep 30', { timeoutMs: 500 })).exitCode).toBe(124);
      expect((await sh.run('type -t builtin', T)).stdout).toBe('function\n');
      expect((await sh.run('sleep 30', { timeoutMs: 500 })).exitCode).toBe(124);
      expect(readFileSync(`/proc/${decoy.pid}/stat`, 'latin1')).toMatch(/\) S /);
      expect((await sh.run('echo on', T)).stdout).toBe('on\n');
    });

    it('kills a shell whose command ignores SIGUSR1, and says the changes since it started were lost', async () => {
      const first = await start();
      await first.run('export KEEP=before', T);
      await first.close();
      const sh = await start();
      const marker = join(fx.dir, 'after-trap-removed');
      // Set by a command of its own, so that both are in place before the timed command starts.
      // (`trap - USR1` would not do: with an EXIT trap set, bash catches it to run that trap, which dumps.)
      await sh.run(`export LATER=1; trap '' USR1`, T);
      const r = await sh.run(`sleep 2; touch ${marker}`, { timeoutMs: 500 });
      expect(r.exitCode).toBe(124);
      expect(r.shellReplaced).toBe(true);
      expect(r.stderr).toContain(`the old shell could not save its state: a new shell took over in ${fx.dir} with the exported variables, ` +
        'functions and aliases the old one had started with; changes made since were lost');
      await sleep(2_500);
      expect(existsSync(marker)).toBe(false);
      expect((await sh.run('echo "[$KEEP][$LATER]"', T)).stdout).toBe('[before][]\n');
    });

    it('says exactly what was lost when the shell was killed (as by the OOM killer), and ends what it had started', async () => {
      const sh = await start();
      await sh.run('export GONE=1; cd /tmp', T);
      const bg = unique(302);
      leftovers.push(bg);
      const r = await sh.run(`echo before; sleep ${bg} & kill -9 $$`, T);
      expect(r.exitCode).toBe(137);
      expect(r.stderr).toBe('berth: the shell was killed by signal 9 (out of memory, or killed); the old shell could not save its state: ' +
        'a new shell took over in /tmp; the exported variables, functions and aliases of the old one were lost ' +
        '(unexported variables, shell options and traps are not kept)\n');
      expect(pidsWithArg(bg).filter(alive)).toEqual([]);
      expect((await sh.run('echo "[$GONE]"; pwd', T)).stdout).toBe('[]\n/tmp\n');
    });

    it('cancels on an AbortSignal like a timeout, with exit code 130; aborted before start, nothing runs', async () => {
      const sh = await start();
      const marker = join(fx.dir, 'cancelled');
      const ac = new AbortController();
      const r = await sh.run(`echo started; sleep 30; touch ${marker}`, {
        ...T,
        signal: ac.signal,
        onChunk: () => ac.abort(),
      });
      expect(r.exitCode).toBe(130);
      expect(r.timedOut).toBe(false);
      expect(r.stdout).toBe('started\n');
      // berth's one line, without bash's report of the job it killed.
      expect(r.stderr).toMatch(/^berth: cancelled after \d+ ms \(the caller went away\); the command's processes were killed and a new shell took over/);
      expect(r.stderr).not.toMatch(/Killed|Terminated/);
      expect(existsSync(marker)).toBe(false);
      const pre = await sh.run(`touch ${marker}`, { ...T, signal: AbortSignal.abort() });
      expect(pre).toMatchObject({ exitCode: 130, stdout: '', stderr: 'berth: cancelled before it started (the caller went away); nothing was run\n' });
      expect(existsSync(marker)).toBe(false);
      expect((await sh.run('echo ok', T)).stdout).toBe('ok\n');
    });
  });
}

/**
 * A warden in a sandbox a fork bomb keeps out of pids, seen in a moment's gap: the timeout finds it
 * out of pids without the command's tree, a look a moment later finds room.
 */
class GapWarden extends Warden {
  override async timeout(k: TreeInput): Promise<TimeoutReport> {
    return { ...(await super.timeout(k)), stillFull: true };
  }

  override async outOfPids(): Promise<boolean> {
    return false;
  }
}

describe('timeout in a sandbox out of pids (real bash; the pids observation stands in for a bomb)', () => {
  let fx: Fixture;
  let warden: Warden;
  let shell: PersistentShell | undefined;
  const leftovers: string[] = [];

  beforeEach(async () => {
    fx = makeFixture();
    warden = new GapWarden({ open: () => openLocalBash({ PATH: process.env.PATH ?? '/usr/bin:/bin' }, fx.dir), mayKillAll: false });
    await warden.start();
  });
  afterEach(async () => {
    await shell?.close();
    await warden.close();
    for (const arg of leftovers.splice(0)) killAll(pidsWithArg(arg));
    fx.cleanup();
  });

  it('ends the old shell\'s jobs before a new shell opens, though the sandbox looks free a moment later, and says so', async () => {
    const job = unique(300);
    leftovers.push(job);
    shell = await PersistentShell.start(fx.options({ killer: warden }));
    await shell.run(`export KEEP=kept; sleep ${job} &`, T);
    // The job's fork returns before its exec: until then /proc shows bash, not `sleep <job>`.
    await vi.waitFor(() => expect(pidsWithArg(job)).toHaveLength(1), { timeout: 5_000 });
    const r = await shell.run('sleep 30', { timeoutMs: 500 });
    expect(r.exitCode).toBe(124);
    expect(r.stderr).toMatch(/a new shell took over in .* with the exported variables, functions and aliases of the old one \(unexported variables, shell options and traps are not kept\); the sandbox had no room for a new shell, so the old shell's background jobs were killed too\n$/);
    expect(pidsWithArg(job).filter(alive)).toEqual([]);
    expect((await shell.run('echo "$KEEP"', T)).stdout).toBe('kept\n');
  });
});

describe('the warden on a host', () => {
  let fx: Fixture;
  let t: ShellTransport | undefined;
  beforeEach(() => {
    fx = makeFixture();
  });
  afterEach(async () => {
    // Only a failed test leaves it running: killed here, not left behind.
    await t?.kill();
    t = undefined;
    fx.cleanup();
  });

  it('ends by itself when its input ends (its stdin is a FIFO it was given read-write): nothing is left if berth exits at once', async () => {
    t = await openLocalBash({ PATH: process.env.PATH ?? '/usr/bin:/bin' }, fx.dir);
    let out = '';
    t.stdout.on('data', (b: Buffer) => (out += b.toString()));
    t.stdin.write(`${WARDEN_SCRIPT}${wardenLoop(false)}`);
    await vi.waitFor(() => expect(out).toMatch(/^warden \d+\n$/), { timeout: 10_000 });
    t.stdin.end();
    // Not killed: a bash still holding its FIFO read-write would wait here for good.
    expect(await t.exited).toBe(0);
  });
});
