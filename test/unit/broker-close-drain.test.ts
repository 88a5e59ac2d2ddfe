import { describe, expect, it } from 'vitest';
import { closeParts, type ClosingParts } from '../../src/broker/broker-lifecycle.js';
import { LiveSandboxes, type LiveSandbox } from '../../src/broker/live-sandboxes.js';
import { Logger } from '../../src/logging/logger.js';

/** Enough of a live sandbox for the in-flight count: enter and leave touch only these fields. */
function live(digest: string): LiveSandbox {
  return { digest, inflight: 0, lastActivityMs: 0 } as unknown as LiveSandbox;
}

/** Whether `p` has settled once the microtasks queued so far have run. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(() => (done = true));
  await new Promise<void>((r) => setImmediate(r));
  return done;
}

/** Close parts that record the steps they are asked for; `drained` is the test's to resolve. */
function closing(drained: Promise<void>): { parts: ClosingParts; steps: string[] } {
  const steps: string[] = [];
  const step = (name: string) => async () => void steps.push(name);
  const parts: ClosingParts = {
    reapers: { stop: step('reapers') },
    lives: { drained: () => drained.then(() => void steps.push('drained')), closeAll: step('shells'), all: () => [] },
    closer: { closeHeld: step('sessions') },
    warm: { close: step('warm') },
    removal: { releaseUnusedAtClose: step('release') },
    egress: { close: step('egress'), holds: () => false },
    backends: { closeAll: step('backends') },
    store: { close: () => void steps.push('store') },
    log: Logger.silent(),
  };
  return { parts, steps };
}

describe('the close waits for the calls in flight', () => {
  it('drained resolves at once when no call is in flight', async () => {
    expect(await settled(new LiveSandboxes().drained())).toBe(true);
  });

  it('drained resolves when the last call in flight on any sandbox leaves, not before', async () => {
    const lives = new LiveSandboxes();
    const a = live('a');
    const b = live('b');
    lives.enter(a);
    lives.enter(b);
    lives.enter(a);
    const drained = lives.drained();
    lives.leave(a);
    lives.leave(b);
    expect(await settled(drained)).toBe(false);
    lives.leave(a);
    expect(await settled(drained)).toBe(true);
  });

  it('the close goes on as the last call ends, however long its grace', async () => {
    let end!: () => void;
    const { parts, steps } = closing(new Promise<void>((r) => (end = r)));
    const closed = closeParts(parts, 3_600_000);
    expect(await settled(closed)).toBe(false);
    expect(steps).toEqual(['reapers']);
    end();
    expect(await settled(closed)).toBe(true);
    expect(steps).toEqual(['reapers', 'drained', 'sessions', 'warm', 'shells', 'release', 'egress', 'backends', 'store']);
  });

  it('the close goes on at its deadline when a call never ends', async () => {
    const { parts, steps } = closing(new Promise<void>(() => {}));
    await closeParts(parts, 0);
    expect(steps).toEqual(['reapers', 'sessions', 'warm', 'shells', 'release', 'egress', 'backends', 'store']);
  });
});

describe('the close says which sandboxes it leaves without their egress proxy', () => {
  /** A live sandbox whose shells did (or did not) report a background job. */
  const withJobs = (key: string, jobs: boolean): LiveSandbox =>
    ({ digest: key, record: { key }, sandbox: { ref: `ref-${key}` }, shells: { hasBackgroundJobs: () => Promise.resolve(jobs) } }) as unknown as LiveSandbox;

  it('a sandbox whose proxy this process serves and whose shell reported a job is named; one its close removes, one without a job and one served elsewhere are not', async () => {
    const lines: string[] = [];
    const kept = withJobs('session:kept', true);
    const removed = withJobs('session:removed', true);
    const idle = withJobs('session:idle', false);
    const elsewhere = withJobs('session:elsewhere', true);
    let all = [kept, removed, idle, elsewhere];
    const { parts } = closing(Promise.resolve());
    parts.lives.all = () => all;
    // The session close removes an ephemeral sandbox: its jobs go with it.
    parts.closer.closeHeld = async () => void (all = all.filter((l) => l !== removed));
    parts.egress.holds = (ref) => ref !== 'ref-session:elsewhere';
    parts.log = new Logger((ns, msg, record) => void lines.push(`${record?.level ?? '?'} ${ns} ${msg}`));
    await closeParts(parts, 0);
    expect(lines.filter((l) => l.includes('egress proxy'))).toEqual([
      expect.stringMatching(/^warn berth:egress sandbox session:kept: a background job started in it may still run, and its egress proxy lived in this berth process/),
    ]);
  });
});
