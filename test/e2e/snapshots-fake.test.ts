import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { Broker } from '../../src/broker/broker.js';
import { isBerthError } from '../../src/errors.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { tempDir } from '../helpers/temp-dir.js';
import { FakeEngine } from '../fake-backend/fake-engine.js';
import { fakeModule } from '../fake-backend/module.js';

/*
 * The broker's snapshot, restore and fork logic on the fake backend, whose snapshots are honest
 * copies of a sandbox's dir and whose processes are real bash: what a snapshot keeps (files and
 * the shell's cwd and exported variables), forks that never see each other, the identity's lock
 * (no snapshot under a running command), the tenant's limits, tenant scoping, a failed restore
 * that changes nothing, and no granted secret's value in a snapshot.
 */

const engines: FakeEngine[] = [];
const brokers: Broker[] = [];
afterEach(async () => {
  for (const b of brokers.splice(0)) await b.close({ graceMs: 2_000 });
  for (const e of engines.splice(0)) await e.removeAll();
});

interface Opened {
  broker: Broker;
  engine: FakeEngine;
  home: string;
}

/** A broker on the fake backend; given `on`, another one on that engine and home (as a second berth process would be). */
async function open(raw: Record<string, unknown> = {}, opts: { snapshots?: boolean; env?: Record<string, string>; on?: Opened } = {}): Promise<Opened> {
  const engine = opts.on?.engine ?? new FakeEngine();
  if (opts.on === undefined) engines.push(engine);
  const home = opts.on?.home ?? tempDir('berth-snap-');
  const modules = BUILTIN_BACKENDS.with(fakeModule(engine, { snapshots: opts.snapshots ?? true }));
  const config = parseConfig({ backend: 'fake', persistent: false, ...raw }, undefined, { backends: modules });
  const broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'], ...opts.env }, reap: false });
  brokers.push(broker);
  return { broker, engine, home };
}

/** The code of what `p` rejects with (fails the test when it resolves). */
async function codeOf(p: Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    await p;
  } catch (err) {
    if (isBerthError(err)) return { code: err.code, message: err.message };
    throw err;
  }
  throw new Error('expected a rejection');
}

const S1 = { session: 's1' };
const STATE = 'mkdir -p work/sub && cd work/sub && export STAGE=one && echo one > "$HOME/file"';
const READ = 'printf "%s|%s|%s" "$(basename "$PWD")" "${STAGE-unset}" "$(cat "$HOME/file")"';

describe('snapshot and restore on the fake backend', () => {
  it('a restore brings back the files, the cwd and the exported variables of the snapshot', async () => {
    const { broker } = await open();
    expect((await broker.exec(S1, STATE)).exitCode).toBe(0);
    const made = await broker.snapshots.create(S1, { name: 'one' });
    expect(made).toMatchObject({ name: 'one', sandboxKey: 'session:s1', backend: 'fake', session: 's1' });
    expect(made.bytes).toBeGreaterThan(0);
    await broker.exec(S1, 'cd "$HOME" && export STAGE=two && echo two > "$HOME/file"');
    expect((await broker.exec(S1, READ)).stdout).toMatch(/\|two\|two$/);

    const r = await broker.snapshots.restore(S1, 'one');
    expect(r.cwd).toMatch(/work\/sub$/);
    expect((await broker.exec(S1, READ)).stdout).toBe('sub|one|one');
    expect(broker.snapshots.list('local').map((s) => s.name)).toEqual(['one']);
  });

  it('the library surface: session.snapshots.create, list, restore, remove', async () => {
    const { broker } = await open();
    const chat = broker.session(S1);
    await chat.exec('echo a > "$HOME/f"');
    await chat.snapshots.create({ name: 'a' });
    await chat.exec('rm "$HOME/f"');
    expect(chat.snapshots.list().map((s) => s.name)).toEqual(['a']);
    await chat.snapshots.restore('a');
    expect((await chat.exec('cat "$HOME/f"')).stdout).toBe('a\n');
    expect(await chat.snapshots.remove('a')).toBe(true);
    expect(await chat.snapshots.remove('a')).toBe(false);
    expect(chat.snapshots.list()).toEqual([]);
  });

  it('a restore whose snapshot was removed behind berth\'s back fails, says so, and changes nothing', async () => {
    const { broker, home } = await open();
    await broker.exec(S1, 'echo before > "$HOME/file"');
    await broker.snapshots.create(S1, { name: 'gone' });
    await broker.exec(S1, 'echo after > "$HOME/file"');
    const snapDir = join(home, 'snapshots', 'fake');
    for (const d of readdirSync(snapDir)) rmSync(join(snapDir, d), { recursive: true });

    const e = await codeOf(broker.snapshots.restore(S1, 'gone'));
    expect(e.code).toBe('not_found');
    expect(e.message).toMatch(/snapshot "gone" cannot be restored: .*missing.*; sandbox "session:s1" and snapshot "gone" are as they were/);
    expect((await broker.exec(S1, 'cat "$HOME/file"')).stdout).toBe('after\n');
    expect(broker.snapshots.list('local').map((s) => s.name)).toEqual(['gone']);
  });

  it('a restore the engine fails to make leaves the sandbox running as it was, its shell state too', async () => {
    const { broker, engine } = await open();
    await broker.exec(S1, 'cd /tmp && export KEEP=yes && echo before > "$HOME/file"');
    await broker.snapshots.create(S1, { name: 'x' });
    await broker.exec(S1, 'echo after > "$HOME/file"');
    engine.refuseCreates = 'the fake engine is out of space';
    const e = await codeOf(broker.snapshots.restore(S1, 'x'));
    expect(e.message).toMatch(/restoring snapshot "x" failed: the fake engine is out of space; sandbox "session:s1" and snapshot "x" are as they were/);
    engine.refuseCreates = undefined;
    expect((await broker.exec(S1, 'printf "%s %s " "$PWD" "$KEEP"; cat "$HOME/file"')).stdout).toBe('/tmp yes after\n');
    expect(engine.all()).toHaveLength(1);
  });

  it('an orphan pass while a restore swaps the sandbox leaves the new one alone (its record names it only after)', async () => {
    const { broker, engine } = await open();
    await broker.exec(S1, 'echo before > "$HOME/file"');
    await broker.snapshots.create(S1, { name: 'x' });
    await broker.exec(S1, 'echo after > "$HOME/file"');
    let reaped: string[] | undefined;
    engine.midRestore = async () => {
      reaped = await broker.reapers.reapOrphans();
    };
    await broker.snapshots.restore(S1, 'x');
    engine.midRestore = undefined;
    expect(reaped).toEqual([]);
    expect(engine.all()).toHaveLength(1);
    const r = await broker.exec(S1, 'cat "$HOME/file"');
    expect(r.stdout).toBe('before\n');
    expect(r.sandboxRecreated ?? false).toBe(false);
  });

  it('a snapshot rm that arrives during a restore from that snapshot waits for it, then removes it', async () => {
    const { broker, engine } = await open();
    await broker.exec(S1, 'echo before > "$HOME/file"');
    await broker.snapshots.create(S1, { name: 'x' });
    let removal: Promise<boolean> | undefined;
    let removedDuringRestore = false;
    engine.midRestore = async () => {
      removal = broker.snapshots.remove(S1, 'x').then((r) => {
        removedDuringRestore = true;
        return r;
      });
      // Time for a removal that did not wait to run to its end (the fake's takes a few ms).
      await new Promise((r) => setTimeout(r, 300));
    };
    await broker.snapshots.restore(S1, 'x');
    engine.midRestore = undefined;
    expect(removedDuringRestore).toBe(false);
    expect(await removal).toBe(true);
    expect(broker.snapshots.list('local')).toEqual([]);
    expect((await broker.exec(S1, 'cat "$HOME/file"')).stdout).toBe('before\n');
  });

  it('across two berth processes: an rm waits for a restore from the snapshot; a restore that waited for an rm fails, changing nothing', async () => {
    const first = await open();
    const other = await open({}, { on: first });
    await first.broker.exec(S1, 'echo before > "$HOME/file"');
    await first.broker.snapshots.create(S1, { name: 'x' });
    await first.broker.exec(S1, 'echo after > "$HOME/file"');
    let removedDuringRestore = false;
    let removal: Promise<boolean> | undefined;
    first.engine.midRestore = async () => {
      removal = other.broker.snapshots.remove(S1, 'x').then((r) => {
        removedDuringRestore = true;
        return r;
      });
      // Time for a removal that did not wait to run to its end (the fake's takes a few ms).
      await new Promise((r) => setTimeout(r, 300));
    };
    await first.broker.snapshots.restore(S1, 'x');
    first.engine.midRestore = undefined;
    expect(removedDuringRestore).toBe(false);
    expect(await removal).toBe(true);
    expect(first.broker.snapshots.list('local')).toEqual([]);
    expect((await first.broker.exec(S1, 'cat "$HOME/file"')).stdout).toBe('before\n');

    // The other way round: the removal holds the snapshot while a restore from the first process asks for it.
    await first.broker.snapshots.create(S1, { name: 'y' });
    await first.broker.exec(S1, 'echo later > "$HOME/file"');
    let restoring: Promise<{ code: string; message: string }> | undefined;
    first.engine.midSnapshotRemove = async () => {
      restoring = codeOf(first.broker.snapshots.restore(S1, 'y'));
      await new Promise((r) => setTimeout(r, 300));
    };
    expect(await other.broker.snapshots.remove(S1, 'y')).toBe(true);
    first.engine.midSnapshotRemove = undefined;
    expect(await restoring).toMatchObject({ code: 'not_found', message: expect.stringContaining('removed meanwhile') });
    expect((await first.broker.exec(S1, 'cat "$HOME/file"')).stdout).toBe('later\n');
  });

  it('no snapshot while a command runs in the sandbox (the identity is busy): refused, and nothing is kept', async () => {
    const { broker, home } = await open();
    await broker.exec(S1, 'true');
    // The snapshot is asked for once the command runs (its first output is in), not after a fixed wait.
    let started!: () => void;
    const runs = new Promise<void>((resolve) => (started = resolve));
    const running = broker.exec(S1, 'echo started; sleep 1.5', { onChunk: () => started() });
    await runs;
    const e = await codeOf(broker.snapshots.create(S1, { name: 'busy' }));
    expect(e.code).toBe('sandbox_busy');
    expect(e.message).toMatch(/cannot be snapshotted now: a command or a background job runs in it \(one its shell lists, or a process a command left running: a daemon too\)/);
    expect((await running).exitCode).toBe(0);
    expect(broker.snapshots.list('local')).toEqual([]);
    expect(existsSync(join(home, 'snapshots', 'fake')) ? readdirSync(join(home, 'snapshots', 'fake')) : []).toEqual([]);
    // A background job of the shell counts too: it could write while the snapshot is made.
    await broker.exec(S1, 'sleep 30 &');
    expect((await codeOf(broker.snapshots.create(S1, { name: 'bg' }))).code).toBe('sandbox_busy');
  });

  it('a snapshot name is unique per sandbox, and names are checked', async () => {
    const { broker } = await open();
    await broker.snapshots.create(S1, { name: 'n' });
    expect((await codeOf(broker.snapshots.create(S1, { name: 'n' }))).message).toMatch(/already has a snapshot "n"/);
    expect((await codeOf(broker.snapshots.create(S1, { name: '@fork-x' }))).code).toBe('usage');
    expect((await codeOf(broker.snapshots.create(S1, { name: '../x' }))).code).toBe('usage');
    // Another sandbox of the tenant may use the same name.
    await broker.snapshots.create({ session: 's2' }, { name: 'n' });
    expect(broker.snapshots.list('local').map((s) => s.sandboxKey)).toEqual(['session:s1', 'session:s2']);
    expect(broker.snapshots.list('local', { session: 's2' }).map((s) => s.sandboxKey)).toEqual(['session:s2']);
  });
});

describe('limits and tenants', () => {
  it('limits.snapshots: past the count the next snapshot is refused, naming the limit', async () => {
    const { broker } = await open({ limits: { snapshots: 1 } });
    await broker.snapshots.create(S1, { name: 'a' });
    const e = await codeOf(broker.snapshots.create(S1, { name: 'b' }));
    expect(e.code).toBe('tenant_limit');
    expect(e.message).toMatch(/tenant "local" keeps 1 snapshots, its limit \(limits.snapshots = 1\)/);
    // Another tenant has its own count.
    await broker.snapshots.create({ tenant: 'other', session: 's1' }, { name: 'a' });
  });

  it('limits.snapshotBytes: a snapshot that would pass it is refused and removed', async () => {
    const { broker, home } = await open({ limits: { snapshotBytes: 4096 } });
    await broker.exec(S1, 'head -c 10000 /dev/zero > "$HOME/big"');
    const e = await codeOf(broker.snapshots.create(S1, { name: 'big' }));
    expect(e.code).toBe('tenant_limit');
    expect(e.message).toMatch(/limits.snapshotBytes = 4096/);
    expect(broker.snapshots.list('local')).toEqual([]);
    // Refused before anything was copied: not even the backend's snapshot dir was made.
    const dir = join(home, 'snapshots', 'fake');
    expect(existsSync(dir) ? readdirSync(dir) : []).toEqual([]);
  });

  it('limits.snapshotBytes: snapshots of one tenant made at the same time cannot together pass it (each claims its size before copying)', async () => {
    const { broker, engine } = await open({ limits: { snapshotBytes: 16_000 } });
    const [a, b] = [{ session: 'a' }, { session: 'b' }];
    for (const s of [a, b]) await broker.exec(s, 'head -c 10000 /dev/zero > "$HOME/big"');
    // B starts while A, measured and claimed, is still copying: B sees A's claim.
    let second: Promise<{ code: string; message: string }> | undefined;
    engine.midSnapshot = async () => {
      engine.midSnapshot = undefined;
      second = codeOf(broker.snapshots.create(b, { name: 'b' }));
      await second;
    };
    await broker.snapshots.create(a, { name: 'a' });
    const e = await second!;
    expect(e.code).toBe('tenant_limit');
    expect(e.message).toMatch(/refused before copying: its dir holds \d+ bytes/);
    expect(broker.snapshots.list('local').map((s) => s.name)).toEqual(['a']);
  });

  it('tenant B neither lists nor restores nor removes tenant A\'s snapshots, even of the same session id', async () => {
    const { broker } = await open();
    const a = { tenant: 'a', session: 's1' };
    const b = { tenant: 'b', session: 's1' };
    await broker.exec(a, 'echo secret-of-a > "$HOME/f"');
    await broker.snapshots.create(a, { name: 'mine' });
    expect(broker.snapshots.list('b')).toEqual([]);
    expect(broker.snapshots.list('b', b)).toEqual([]);
    expect((await codeOf(broker.snapshots.restore(b, 'mine'))).code).toBe('not_found');
    expect(await broker.snapshots.remove(b, 'mine')).toBe(false);
    expect((await codeOf(broker.snapshots.fork(b, { toSession: 's9', from: 'mine' }))).code).toBe('not_found');
    expect(broker.snapshots.list('a').map((s) => s.name)).toEqual(['mine']);
  });

  it('a snapshot never holds a granted secret\'s value: one written to a file by the agent is refused, naming the variable and the file', async () => {
    const secret = 'tok-5f0c1d2e3a4b5c6d';
    const { broker, home } = await open({ env: { forward: ['API_TOKEN'] } }, { env: { API_TOKEN: secret } });
    await broker.exec(S1, 'echo "$API_TOKEN" > "$HOME/leak.txt"');
    const e = await codeOf(broker.snapshots.create(S1, { name: 'leaky' }));
    expect(e.code).toBe('policy_refused');
    expect(e.message).toMatch(/secret API_TOKEN \(in leak.txt\)/);
    expect(e.message).not.toContain(secret);
    expect(readdirSync(join(home, 'snapshots', 'fake'))).toEqual([]);
    // The shell's own saved state never holds it (the secret is unset before the dump): without the file, a snapshot is made.
    await broker.exec(S1, 'rm "$HOME/leak.txt"');
    await broker.snapshots.create(S1, { name: 'clean' });
  });

  it('a backend without snapshots: unsupported, naming the backend', async () => {
    const { broker } = await open({}, { snapshots: false });
    const e = await codeOf(broker.snapshots.create(S1, { name: 'x' }));
    expect(e.code).toBe('unsupported');
    expect(e.message).toMatch(/backend "fake" keeps no snapshots, so it cannot snapshot, restore or fork a sandbox; docker and bwrap can/);
    expect((await codeOf(broker.snapshots.fork(S1, { toSession: 's2' }))).code).toBe('unsupported');
  });
});

describe('fork on the fake backend', () => {
  it('a fork starts from the source\'s current state, in its cwd with its variables; forks never see each other\'s changes', async () => {
    const { broker, engine } = await open();
    await broker.exec(S1, STATE);
    const f = await broker.snapshots.fork(S1, { toSession: 'b1' });
    expect(f).toMatchObject({ session: 'b1', sandboxKey: 'session:b1', from: null });
    await broker.snapshots.fork(S1, { toSession: 'b2' });
    expect((await broker.exec({ session: 'b1' }, READ)).stdout).toBe('sub|one|one');
    // Its cwd is in its own sandbox, not the source's.
    expect((await broker.exec({ session: 'b1' }, '[ "$PWD" = "$HOME/work/sub" ] && echo own')).stdout).toBe('own\n');

    await broker.exec({ session: 'b1' }, 'echo b1 > "$HOME/file"; export STAGE=b1');
    await broker.exec(S1, 'echo s1 > "$HOME/file"');
    expect((await broker.exec({ session: 'b2' }, READ)).stdout).toBe('sub|one|one');
    expect((await broker.exec(S1, 'cat "$HOME/file"')).stdout).toBe('s1\n');
    expect((await broker.exec({ session: 'b1' }, READ)).stdout).toBe('sub|b1|b1');
    expect(engine.all()).toHaveLength(3);
    // The bases of the forks are no named snapshots of the tenant.
    expect(broker.snapshots.list('local')).toEqual([]);
  });

  it('fork --from NAME starts from that snapshot, not from the current state', async () => {
    const { broker } = await open();
    await broker.exec(S1, STATE);
    await broker.snapshots.create(S1, { name: 'one' });
    await broker.exec(S1, 'echo two > "$HOME/file"');
    const f = await broker.session(S1).fork({ toSession: 'from-one', from: 'one' });
    expect(f.from).toBe('one');
    expect((await broker.exec({ session: 'from-one' }, READ)).stdout).toBe('sub|one|one');
  });

  it('a fork whose target shares the source\'s sandbox (a persistent profile) is refused, saying why', async () => {
    const { broker } = await open({ persistent: true });
    await broker.exec(S1, 'true');
    const e = await codeOf(broker.snapshots.fork(S1, { toSession: 's2' }));
    expect(e.code).toBe('policy_refused');
    expect(e.message).toMatch(/session "s2" resolves to the same sandbox "default" as the source \(rule auto:7: one sandbox shared across sessions\)/);
  });

  it('a fork to a session that has a sandbox already is refused; a failed fork leaves no sandbox, record or base behind', async () => {
    const { broker, engine, home } = await open();
    await broker.exec(S1, 'true');
    await broker.exec({ session: 'taken' }, 'true');
    expect((await codeOf(broker.snapshots.fork(S1, { toSession: 'taken' }))).message).toMatch(/session "taken" already has sandbox "session:taken"/);

    engine.refuseCreates = 'no room';
    const e = await codeOf(broker.snapshots.fork(S1, { toSession: 'nope' }));
    engine.refuseCreates = undefined;
    expect(e.message).toMatch(/fork of sandbox "session:s1" to session "nope" failed: no room; sandbox "session:s1" and its snapshots are as they were/);
    expect(broker.list('local').map((s) => s.sandboxKey).sort()).toEqual(['session:s1', 'session:taken']);
    expect(readdirSync(join(home, 'snapshots', 'fake'))).toEqual([]);
    expect((await broker.exec(S1, 'echo ok')).stdout).toBe('ok\n');
  });
});

describe('the snapshot sweep', () => {
  it('removes a fork\'s base once the forked sandbox is gone, and a backend snapshot no record names', async () => {
    const { broker, home } = await open();
    await broker.exec(S1, 'true');
    await broker.snapshots.fork(S1, { toSession: 'f' });
    const snapDir = join(home, 'snapshots', 'fake');
    expect(readdirSync(snapDir)).toHaveLength(1);
    expect(await broker.sweepSnapshots()).toEqual([]);
    mkdirSync(join(snapDir, 'orphan'));
    await broker.closeSession({ session: 'f' });
    const removed = await broker.sweepSnapshots();
    expect(removed).toHaveLength(2);
    expect(readdirSync(snapDir)).toEqual([]);
  });

  it('removes named snapshots past limits.snapshotRetentionDays', async () => {
    const { broker } = await open({ limits: { snapshotRetentionDays: 2 } });
    await broker.snapshots.create(S1, { name: 'old' });
    expect(await broker.sweepSnapshots(Date.now() + 1 * 86_400_000)).toEqual([]);
    expect(await broker.sweepSnapshots(Date.now() + 3 * 86_400_000)).toHaveLength(1);
    expect(broker.snapshots.list('local')).toEqual([]);
  });

  it('audits each action, failed ones with their code', async () => {
    const { broker } = await open();
    await broker.snapshots.create(S1, { name: 'a' });
    await broker.snapshots.restore(S1, 'a');
    await codeOf(broker.snapshots.restore(S1, 'nope'));
    await broker.snapshots.fork(S1, { toSession: 'f' });
    const entries = broker.audit({ tenant: 'local' }).filter((e) => e.kind === 'snapshot').map((e) => e.command);
    expect(entries.reverse()).toEqual(['snapshot create a', 'snapshot restore a', 'snapshot restore nope (failed: not_found)', 'fork --to-session f']);
  });
});
