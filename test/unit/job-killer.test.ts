import Database from 'better-sqlite3';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Sandbox } from '../../src/backends/backend.js';
import { JobKiller } from '../../src/broker/job-killer.js';
import { JobLedger, KILL_PENDING_MS } from '../../src/broker/job-ledger.js';
import { JobProbe, type JobState } from '../../src/broker/job-probe.js';
import { JobReader, type JobReadResult } from '../../src/broker/job-reader.js';
import type { JobRecord } from '../../src/broker/state/job-table.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { Logger } from '../../src/logging/logger.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * A kill and a read of the same job at once (a real SQLite file; the sandbox is a stand-in that
 * answers berth's helper scripts): the read finds the job's processes gone with no exit code
 * while the kill runs, and records its end as unknown before the kill records it.
 */

function job(over: Partial<JobRecord> = {}): JobRecord {
  return {
    id: 'job_0123456789abcdef', tenant: 'acme', profile: 'default', session: 's1', user: null, digest: 'd1', sandboxKey: 'session:s1',
    scope: '{}', command: 'sleep 300', dir: '/tmp/berth/jobs/job_0123456789abcdef', startedMs: Date.now() - 1_000,
    status: 'running', exitCode: null, endedMs: null, ...over,
  };
}

/** The stores the tests opened, closed after each. */
const stores: StateStore[] = [];
afterEach(() => {
  for (const store of stores.splice(0)) store.close();
});

/** A killer over a real store whose sandbox runs `duringKill` while its kill script runs. */
function setUp(duringKill: (ledger: JobLedger, j: JobRecord) => unknown) {
  const home = tempDir('berth-job-killer-');
  const store = StateStore.open(home);
  stores.push(store);
  const ledger = new JobLedger({ jobs: store.jobs, resolver: { resolve: () => { throw new Error('not asked'); } } });
  const gone: JobState = { exitCode: null, alive: false, size: 0, bytes: Buffer.alloc(0) };
  const killer = new JobKiller({ jobs: store.jobs, ledger, probe: { probe: () => Promise.resolve(gone) }, log: Logger.silent() });
  const j = job();
  store.jobs.put(j);
  const sandbox = {
    processGroups: { killGroup: () => Promise.resolve(1) },
    execOnce: async () => {
      await duringKill(ledger, j);
      return { stdout: Buffer.from('1\n'), stderr: Buffer.alloc(0), exitCode: 0 };
    },
  } as unknown as Sandbox;
  const row = (): JobRecord | undefined => store.jobs.get(j.tenant, j.profile, j.session, j.user, j.id);
  // A reader as a berth process's job reads are served (any process of the home: the mark is in the store).
  const reader = new JobReader({
    ledger, probe: { probe: () => Promise.resolve(gone) }, sandboxes: { existing: () => Promise.resolve(sandbox) },
    resolver: { resolve: () => { throw new Error('not asked'); }, policy: () => { throw new Error('not asked'); } },
  });
  const read = (): Promise<JobReadResult> => reader.read({ tenant: j.tenant, profile: j.profile, session: j.session }, j.id, { maxBytes: 0 });
  // The idle reaper's look at the sandbox's jobs (JobProbe.activeIn), its probe answering "gone".
  const jobProbe = new JobProbe({ jobs: store.jobs, ledger });
  vi.spyOn(jobProbe, 'probe').mockResolvedValue(gone);
  const activeIn = (): Promise<boolean> => jobProbe.activeIn(j.digest, sandbox);
  return { store, killer, sandbox, j, row, read, home, activeIn };
}

describe('a job read while it is killed', () => {
  it('reads as running, not done, while the kill runs (nothing recorded), then as killed', async () => {
    let during: JobReadResult | undefined;
    const t = setUp(async () => {
      during = await t.read();
    });
    expect(await t.killer.kill(t.j, t.sandbox)).toBe(true);
    expect(during).toMatchObject({ status: 'running', done: false, exitCode: null });
    expect(await t.read()).toMatchObject({ status: 'killed', done: true, exitCode: null });
  });

  it('a sandbox\'s removal kills its jobs marked the same way (killAllIn): running while killed, then killed, no mark left', async () => {
    let during: JobReadResult | undefined;
    let mark: unknown;
    const markOf = (): unknown => {
      const db = new Database(join(t.home, 'state.db'), { readonly: true });
      try {
        return (db.prepare('SELECT kill_started_ms AS m FROM jobs').get() as { m: unknown }).m;
      } finally {
        db.close();
      }
    };
    const t = setUp(async () => {
      mark = markOf();
      during = await t.read();
    });
    await t.killer.killAllIn(t.j.digest, t.sandbox);
    expect(mark).toEqual(expect.any(Number));
    expect(during).toMatchObject({ status: 'running', done: false });
    expect(t.row()).toMatchObject({ status: 'killed' });
    expect(markOf()).toBeNull();
  });

  it("the idle reaper's look during the kill counts the job as running and records nothing", async () => {
    let during: boolean | undefined;
    const t = setUp(async () => {
      during = await t.activeIn();
    });
    expect(await t.killer.kill(t.j, t.sandbox)).toBe(true);
    expect(during).toBe(true);
    expect(t.row()).toMatchObject({ status: 'killed' });
    expect(await t.activeIn()).toBe(false);
  });

  it('a store that refuses the mark does not stop the kill', async () => {
    let killScriptRan = false;
    const t = setUp(() => {
      killScriptRan = true;
    });
    // Only the mark's column is refused (as a full disk would refuse it); the end is still recorded.
    const other = new Database(join(t.home, 'state.db'));
    other.exec("CREATE TRIGGER refuse BEFORE UPDATE OF kill_started_ms ON jobs BEGIN SELECT RAISE(ABORT, 'refused'); END;");
    other.close();
    expect(await t.killer.kill(t.j, t.sandbox)).toBe(true);
    expect(killScriptRan).toBe(true);
    expect(t.row()).toMatchObject({ status: 'killed' });
  });

  it('a kill that failed leaves no mark: the next read records the end as unknown', async () => {
    const t = setUp(() => {
      throw new Error('the sandbox went');
    });
    await expect(t.killer.kill(t.j, t.sandbox)).rejects.toThrow('the sandbox went');
    expect(await t.read()).toMatchObject({ status: 'unknown', done: true });
  });

  it('a mark older than a kill can take (its process died mid-kill) is not waited on', async () => {
    const t = setUp(() => undefined);
    t.store.jobs.markKilling(t.j.id, Date.now() - 1_000);
    expect(await t.read()).toMatchObject({ status: 'running', done: false });
    t.store.jobs.markKilling(t.j.id, Date.now() - KILL_PENDING_MS - 1_000);
    expect(await t.read()).toMatchObject({ status: 'unknown', done: true });
  });
});

describe('a job killed while it is read', () => {
  it('is killed, not unknown, when a read during the kill recorded its end first', async () => {
    const t = setUp((ledger, j) => ledger.settle(j, 'unknown', null));
    expect(await t.killer.kill(t.j, t.sandbox)).toBe(true);
    expect(t.row()).toMatchObject({ status: 'killed', exitCode: null });
  });

  it('keeps an exit code a read recorded during the kill (the job ended on its own)', async () => {
    const t = setUp((ledger, j) => ledger.settle(j, 'exited', 3));
    await t.killer.kill(t.j, t.sandbox);
    expect(t.row()).toMatchObject({ status: 'exited', exitCode: 3 });
  });

  it('keeps an unknown end recorded before the kill began (its sandbox had vanished then)', async () => {
    const t = setUp(() => undefined);
    t.store.jobs.end(t.j.id, 'unknown', null, Date.now() - 5_000);
    await t.killer.kill(t.j, t.sandbox);
    expect(t.row()).toMatchObject({ status: 'unknown', exitCode: null });
  });
});
