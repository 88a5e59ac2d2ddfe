import Database from 'better-sqlite3';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Backend } from '../../src/backends/backend.js';
import { LiveSandboxes, type LiveSandbox } from '../../src/broker/live-sandboxes.js';
import type { SandboxRecord } from '../../src/broker/state/sandbox-table.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { STAMP_AHEAD_MS } from '../../src/broker/state/write-queue.js';
import { tempDir } from '../helpers/temp-dir.js';

function record(lastUsedMs: number): SandboxRecord {
  return {
    digest: 'd1', backend: 'docker', tenant: 'acme', profile: 'default', key: 'session:s1', rule: 'auto:5', ephemeral: false,
    ref: 'c1', name: 'berth-c1', hostDir: null, mount: null, createdMs: 1, lastUsedMs, heldBy: 'p:1',
  };
}

/** A store in `home` holding sandbox d1 and its session s1, both last used at 1,000. */
function seeded(home: string): StateStore {
  const store = StateStore.open(home);
  store.sandboxes.put(record(1_000));
  store.sessions.open('acme', 'default', 's1', 'd1', null, 1_000);
  return store;
}

function touchBoth(store: StateStore, nowMs: number): void {
  store.sessions.touch('acme', 'default', 's1', nowMs);
  store.sandboxes.touch('d1', nowMs);
}

const lastSeen = (store: StateStore): number | undefined => store.sessions.get('acme', 'default', 's1')?.lastSeenMs;
const lastUsed = (store: StateStore): number | undefined => store.sandboxes.get('d1')?.lastUsedMs;

// A call's touches go through a write queue (one transaction for many, on a real SQLite file):
// written at a flush (the queue's timer, or close), never moved back by a late one.
describe('touches of sessions and sandboxes', () => {
  it('are written in a batch, not by the call itself, and land at the flush', () => {
    const store = seeded(tempDir('berth-touches-'));
    touchBoth(store, 9_000);
    expect([lastSeen(store), lastUsed(store)]).toEqual([1_000, 1_000]);
    store.sessions.flushTouches();
    store.sandboxes.flushTouches();
    expect([lastSeen(store), lastUsed(store)]).toEqual([9_000, 9_000]);
    store.close();
  });

  it('never move a time back: a touch queued before a newer write keeps the newer time', () => {
    const store = seeded(tempDir('berth-touches-'));
    touchBoth(store, 5_000);
    // Written meanwhile: a bring-up's record, a session opened again.
    store.sandboxes.put(record(7_000));
    store.sessions.open('acme', 'default', 's1', 'd1', null, 7_000);
    store.sessions.flushTouches();
    store.sandboxes.flushTouches();
    expect([lastSeen(store), lastUsed(store)]).toEqual([7_000, 7_000]);
    store.close();
  });

  it('after the wall clock stepped back (more than STAMP_AHEAD_MS), a touch replaces the time ahead of it; a late write by less does not', () => {
    const store = seeded(tempDir('berth-touches-'));
    const flush = (): void => {
      store.sessions.flushTouches();
      store.sandboxes.flushTouches();
    };
    const t = 10 * STAMP_AHEAD_MS;
    touchBoth(store, t);
    flush();
    // A touch a moment older that landed later (two processes, a queue's delay): the newer stays.
    touchBoth(store, t - 2_000);
    flush();
    expect([lastSeen(store), lastUsed(store)]).toEqual([t, t]);
    // The clock set back by an hour: the next touch is the truth, else the sandbox could not go idle for an hour.
    touchBoth(store, t - STAMP_AHEAD_MS - 1);
    flush();
    expect([lastSeen(store), lastUsed(store)]).toEqual([t - STAMP_AHEAD_MS - 1, t - STAMP_AHEAD_MS - 1]);
    store.close();
  });

  it('ahead of now by more than STAMP_AHEAD_MS are set back to now by the sweep\'s pass (an idle one gets no touch); nearer ones stay', () => {
    const store = seeded(tempDir('berth-touches-'));
    const now = 10 * STAMP_AHEAD_MS;
    store.sandboxes.put(record(now + STAMP_AHEAD_MS + 1));
    store.sessions.open('acme', 'default', 's1', 'd1', null, now + STAMP_AHEAD_MS - 1);
    store.sandboxes.stampsBack(now);
    store.sessions.stampsBack(now);
    expect([lastSeen(store), lastUsed(store)]).toEqual([now + STAMP_AHEAD_MS - 1, now]);
    store.close();
  });

  it('held in this process (a live sandbox\'s last activity) ahead of now by more than STAMP_AHEAD_MS are set back to now; nearer ones stay', () => {
    const lives = new LiveSandboxes();
    const now = 10 * STAMP_AHEAD_MS;
    const live = (digest: string, lastActivityMs: number): LiveSandbox => ({ digest, lastActivityMs } as unknown as LiveSandbox);
    const ahead = live('ahead', now + STAMP_AHEAD_MS + 1);
    const near = live('near', now + STAMP_AHEAD_MS);
    const past = live('past', now - 1);
    for (const l of [ahead, near, past]) lives.add(l, {} as Backend);
    expect(lives.stampsBack(now).map((l) => l.digest)).toEqual(['ahead']);
    expect([ahead, near, past].map((l) => l.lastActivityMs)).toEqual([now, now + STAMP_AHEAD_MS, now - 1]);
  });

  it('that fail to write are dropped, never thrown at the call or the timer that flushes them', () => {
    const home = tempDir('berth-touches-');
    const store = seeded(home);
    // Another connection makes every update of the two tables fail, as a broken file would.
    const other = new Database(join(home, 'state.db'));
    other.exec(`CREATE TRIGGER no_sessions BEFORE UPDATE ON sessions BEGIN SELECT RAISE(ABORT, 'refused'); END;
      CREATE TRIGGER no_sandboxes BEFORE UPDATE ON sandboxes BEGIN SELECT RAISE(ABORT, 'refused'); END;`);
    other.close();
    touchBoth(store, 9_000);
    expect(() => store.sessions.flushTouches()).not.toThrow();
    expect(() => store.sandboxes.flushTouches()).not.toThrow();
    expect([lastSeen(store), lastUsed(store)]).toEqual([1_000, 1_000]);
    store.close();
  });

  it('queued at close are written before the file closes', () => {
    const home = tempDir('berth-touches-');
    const store = seeded(home);
    touchBoth(store, 9_000);
    store.close();
    const again = StateStore.open(home);
    expect([lastSeen(again), lastUsed(again)]).toEqual([9_000, 9_000]);
    again.close();
  });
});
