import { randomBytes, randomInt } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it, onTestFinished } from 'vitest';
import type { Backend, Sandbox, SandboxSpec } from '../../src/backends/backend.js';
import { BwrapBackend } from '../../src/backends/bwrap/bwrap-backend.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { PolicyRefusedError } from '../../src/errors.js';
import { describeBwrap, testRange } from '../helpers/bwrap.js';
import { pidsWithArg, waitNoneWithArg } from '../helpers/processes.js';

/*
 * The bwrap backend's own guarantees beyond the conformance suite: removal ends the bwraps other
 * berth processes run over a sandbox, and records from a tampered or foreign state store (a ref
 * outside this installation's roots, another installation's sandbox) are refused, not followed.
 */

const range = testRange();

interface Env {
  root: string;
  backend(installation: string): Backend;
  spec(installation: string, key: string, ephemeral: boolean): SandboxSpec;
}

function env(): Env {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'berth-bwrap-backend-')));
  chmodSync(dir, 0o711);
  const root = join(dir, 'root');
  const home = join(dir, 'home');
  mkdirSync(home, { mode: 0o700 });
  const made: Backend[] = [];
  onTestFinished(async () => {
    for (const b of made) await b.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const settings = parseConfig({ backend: 'bwrap', bwrap: { root, uids: range, tmpSizeMb: 16 } }, undefined).base.bwrap;
  return {
    root,
    backend: (installation) => {
      // One home per installation: each remembers the roots it used.
      const h = join(home, installation);
      mkdirSync(h, { recursive: true, mode: 0o700 });
      const b = new BwrapBackend({ berthHome: h, installation });
      made.push(b);
      return b;
    },
    spec: (installation, key, ephemeral) => {
      const digest = randomBytes(32).toString('hex');
      return {
        identity: { installation, tenant: 'local', profile: 'default', key }, digest, dirName: `t-${digest.slice(0, 8)}`,
        ephemeral, mount: null, rule: 'auto:5', section: settings,
      };
    },
  };
}

/** Waits (bounded) until `n` processes carry `marker`. */
async function waitCount(marker: string, n: number): Promise<number[]> {
  for (let i = 0; i < 100 && pidsWithArg(marker).length < n; i++) await new Promise((r) => setTimeout(r, 50));
  return pidsWithArg(marker);
}

async function sh(s: Sandbox, script: string): Promise<string> {
  const r = await s.execOnce(['sh', '-c', script]);
  expect(r.exitCode, r.stderr.toString()).toBe(0);
  return r.stdout.toString();
}

describeBwrap('bwrap backend', () => {
  it('removing a sandbox ends the bwrap another berth process runs over it, deletes its dirs and frees its uid', async () => {
    const e = env();
    const [a, b] = [e.backend('inst-1'), e.backend('inst-1')];
    const spec = e.spec('inst-1', 'shared', false);
    const inA = await a.ensure(spec, undefined);
    const m = String(randomInt(1_000_000, 9_000_000));
    const job = await inA.spawn(['sh', '-c', `sleep ${m} & sleep ${m}`], { env: {}, stdin: false });
    expect(await waitCount(m, 2)).toHaveLength(2);
    await b.remove(inA.ref, inA.hostDir);
    expect(await waitNoneWithArg(m)).toEqual([]);
    expect(await job.exited).toBeNull();
    expect(existsSync(inA.ref)).toBe(false);
    expect(readdirSync(join(e.root, 'uids')).filter((n) => /^\d+$/.test(n))).toEqual([]);
  });

  it('counts the processes of its pid namespace against maxProcesses, from the host', async () => {
    const e = env();
    const s = await e.backend('inst-1').ensure(e.spec('inst-1', 'session:n', true), undefined);
    const before = await s.processCount!();
    const m = String(randomInt(1_000_000, 9_000_000));
    const p = await s.spawn(['sh', '-c', `sleep ${m} & sleep ${m} & sleep ${m} & wait`], { env: {}, stdin: false });
    expect(await waitCount(m, 3)).toHaveLength(3);
    const during = await s.processCount!();
    expect(during!.limit).toBe(1024);
    // The three sleeps, their shell and its watcher, on top of what ran before.
    expect(during!.current - before!.current).toBe(5);
    await p.kill();
  });

  it('a new sandbox that cannot start leaves no dir and no uid claim behind', async () => {
    const e = env();
    const a = e.backend('inst-1');
    await a.ensure(e.spec('inst-1', 'session:ok', true), undefined);
    const before = readdirSync(join(e.root, 'sandboxes')).sort();
    const claims = readdirSync(join(e.root, 'uids')).sort();
    // A workspace no sandbox may run as: a file where a dir is expected (or, as root, a root-owned dir).
    const ws = join(e.root, '..', 'not-a-dir');
    writeFileSync(ws, '');
    await expect(a.ensure({ ...e.spec('inst-1', 'session:bad', true), mount: ws }, undefined)).rejects.toThrow(/is not a directory/);
    expect(readdirSync(join(e.root, 'sandboxes')).sort()).toEqual(before);
    expect(readdirSync(join(e.root, 'uids')).sort()).toEqual(claims);
  });

  it('stop ends its processes and keeps its files; the next ensure starts it again with /tmp empty', async () => {
    const e = env();
    const a = e.backend('inst-1');
    const spec = e.spec('inst-1', 'p', false);
    const s = await a.ensure(spec, undefined);
    await sh(s, 'echo kept > /workspace/f; echo gone > /tmp/t');
    await a.stop(s.ref);
    expect((await a.listManaged()).find((x) => x.ref === s.ref)).toMatchObject({ running: false });
    const again = await a.ensure(spec, s.ref);
    expect([again.ref, again.recreated]).toEqual([s.ref, false]);
    expect(await sh(again, 'cat /workspace/f; cat /tmp/t 2>/dev/null || echo empty')).toBe('kept\nempty\n');
  });

  it('a sandbox started again takes the FIFO sets its last start left: its run dir does not grow, an earlier process\'s stale sets go', async () => {
    const e = env();
    const a = e.backend('inst-1');
    const spec = e.spec('inst-1', 'fifos', false);
    const s = await a.ensure(spec, undefined);
    const run = join(s.ref, 'run');
    const fifos = (): string[] => readdirSync(run).filter((n) => /^[0-9a-f]{16}\.[0-3]$/.test(n)).sort();
    await sh(s, 'true');
    const afterFirst = fifos();
    expect(afterFirst.length).toBeGreaterThan(0);
    await a.stop(s.ref);
    await sh(await a.ensure(spec, s.ref), 'true');
    // The second start made no batch: its process took one of the sets the first left.
    const afterSecond = fifos();
    expect(afterSecond).toHaveLength(afterFirst.length - 4);
    expect(afterFirst).toEqual(expect.arrayContaining(afterSecond));
    for (let i = 0; i < 10; i++) {
      await a.stop(s.ref);
      await sh(await a.ensure(spec, s.ref), 'true');
    }
    // Refilled as sets are used, never a batch per start (that left 7 sets, 28 files, a start).
    const kept = fifos();
    expect(kept.length).toBeLessThanOrEqual(afterFirst.length + 4);

    // Another process's pool starts on the same dir: sets made ahead longer ago than the stale age
    // (by their change time, which cannot be set back: the test moves the clock) are swept first,
    // and the new pool's own sets serve it.
    await a.stop(s.ref);
    const b = e.backend('inst-1');
    const now = Date.now;
    Date.now = () => now() + 11 * 60_000;
    let again: Sandbox;
    try {
      again = await b.ensure(spec, s.ref);
    } finally {
      Date.now = now;
    }
    expect(await sh(again, 'echo ok')).toBe('ok\n');
    expect(fifos().filter((n) => kept.includes(n))).toEqual([]);
  });

  it('a sandbox another process removed and made again under another uid starts: the FIFO pool kept for its dir is not reused', async () => {
    const e = env();
    const [a, b] = [e.backend('inst-1'), e.backend('inst-1')];
    const spec = e.spec('inst-1', 'again', false);
    const s = await a.ensure(spec, undefined);
    await sh(s, 'true');
    const uid = statSync(join(s.ref, 'workspace')).uid;
    await a.stop(s.ref);
    await b.remove(s.ref, undefined);
    // Another sandbox took its uid meanwhile: the one made again gets the next.
    writeFileSync(join(e.root, 'uids', String(uid)), 'another sandbox');
    const again = await a.ensure(spec, s.ref);
    expect(again.ref).toBe(s.ref);
    expect(statSync(join(again.ref, 'workspace')).uid).not.toBe(uid);
    expect(await sh(again, 'echo ok')).toBe('ok\n');
  });

  it('a recorded ref outside this installation\'s roots is refused and nothing there is deleted', async () => {
    const e = env();
    const a = e.backend('inst-1');
    await a.ensure(e.spec('inst-1', 'p', false), undefined);
    const elsewhere = realpathSync(mkdtempSync(join(tmpdir(), 'berth-bwrap-victim-')));
    onTestFinished(() => rmSync(elsewhere, { recursive: true, force: true }));
    const victim = join(elsewhere, 'sandboxes', 'x');
    mkdirSync(victim, { recursive: true });
    writeFileSync(join(victim, 'precious'), 'keep me');
    for (const ref of [victim, join(e.root, 'sandboxes', '..', 'uids'), '/etc']) {
      await expect(a.remove(ref, undefined)).rejects.toBeInstanceOf(PolicyRefusedError);
    }
    expect(existsSync(join(victim, 'precious'))).toBe(true);
    expect(existsSync(join(e.root, 'uids'))).toBe(true);
  });

  it('another installation\'s sandbox in a shared root is never adopted, listed or removed', async () => {
    const e = env();
    const [mine, theirs] = [e.backend('inst-1'), e.backend('inst-2')];
    const their = await theirs.ensure(e.spec('inst-2', 'session:x', true), undefined);
    await sh(their, 'echo theirs > /workspace/f');
    // A store that records their dir for one of my ephemeral sandboxes: a new sandbox, not theirs.
    const spec = e.spec('inst-1', 'session:x', true);
    const got = await mine.ensure(spec, their.ref);
    expect(got.ref).not.toBe(their.ref);
    expect(got.recreated).toBe(true);
    expect(await sh(got, 'cat /workspace/f 2>/dev/null || echo none')).toBe('none\n');
    expect((await mine.listManaged()).map((x) => x.ref)).toEqual([got.ref]);
    await expect(mine.remove(their.ref, undefined)).rejects.toThrow(/another berth installation \(inst-2\)/);
    expect(await sh(their, 'cat /workspace/f')).toBe('theirs\n');
  });
});
