import { describe, expect, it } from 'vitest';
import { closeParts, type ClosingParts } from '../../src/broker/broker-lifecycle.js';
import type { KeptSandbox } from '../../src/broker/egress-keeper.js';
import { LiveSandboxes, type LiveSandbox } from '../../src/broker/live-sandboxes.js';
import type { ResolvedCall } from '../../src/broker/resolve-call.js';
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
    egress: { close: step('egress'), holds: () => false, heldCall: () => undefined, listenerFor: () => undefined, stopAccepting: () => void steps.push('stop accepting') },
    backends: { closeAll: step('backends') },
    store: { close: () => void steps.push('store') },
    keeper: undefined,
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

describe('a step of the close that fails', () => {
  it('does not stop the steps after it: the shells, the engines and the store are still let go, the log says what failed, and the close rejects with that failure', async () => {
    const lines: string[] = [];
    const { parts, steps } = closing(Promise.resolve());
    parts.closer.closeHeld = () => Promise.reject(new Error('engine refused the removal'));
    parts.backends.closeAll = () => Promise.reject(new Error('second failure'));
    parts.log = new Logger((ns, msg, record) => void lines.push(`${record?.level ?? '?'} ${ns} ${msg}`));
    await expect(closeParts(parts, 0)).rejects.toThrow('engine refused the removal');
    expect(steps).toEqual(['reapers', 'drained', 'warm', 'shells', 'release', 'egress', 'store']);
    expect(lines).toEqual([
      'warn berth:broker close: closing the sessions this process holds failed (the close goes on): engine refused the removal',
      'warn berth:broker close: letting the engines go failed (the close goes on): second failure',
    ]);
  });
});

describe('closing every shell', () => {
  it('a shell that fails to close does not keep the others open: each is closed, each sandbox let go, then the failure is thrown', async () => {
    const closed: string[] = [];
    const released: string[] = [];
    const lives = new LiveSandboxes((d) => void released.push(d));
    const withShells = (digest: string, close: () => Promise<void>) => ({ digest, shells: { close } }) as unknown as LiveSandbox;
    lives.add(withShells('a', () => Promise.reject(new Error('shell a would not close'))), {} as never);
    lives.add(withShells('b', async () => void closed.push('b')), {} as never);
    await expect(lives.closeAll()).rejects.toThrow('shell a would not close');
    expect(closed).toEqual(['b']);
    expect(released).toEqual(['a', 'b']);
    expect(lives.all()).toEqual([]);
  });
});

describe('the close says which sandboxes it leaves without their egress proxy', () => {
  /** A live sandbox whose shells did (or did not) report a background job. */
  const withJobs = (key: string, jobs: boolean): LiveSandbox =>
    ({ digest: key, record: { key }, traits: { runsWithoutBerth: true }, sandbox: { ref: `ref-${key}` }, shells: { hasBackgroundJobs: () => Promise.resolve(jobs) } }) as unknown as LiveSandbox;

  it('a sandbox whose proxy this process serves and whose shell reported a job is named; one its close removes, one without a job, one served elsewhere and one whose processes end with berth are not', async () => {
    const lines: string[] = [];
    const kept = withJobs('session:kept', true);
    const removed = withJobs('session:removed', true);
    const idle = withJobs('session:idle', false);
    const elsewhere = withJobs('session:elsewhere', true);
    // bwrap's processes end with the process that started them: its job goes too, nothing to say.
    const endsWithBerth = { ...withJobs('session:bwrap', true), traits: {} } as LiveSandbox;
    let all = [kept, removed, idle, elsewhere, endsWithBerth];
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

  it('with a keeper, the sandboxes go to it (scope without the token) before the shells and the listener close, and the log says which process keeps them', async () => {
    const lines: string[] = [];
    const kept = withJobs('session:kept', true);
    const idle = withJobs('session:idle', false);
    const { parts, steps } = closing(Promise.resolve());
    parts.lives.all = () => [kept, idle];
    parts.egress.holds = () => true;
    parts.egress.heldCall = (ref) => ({ scope: { tenant: 't', profile: 'p', session: ref, token: { id: 'tok_x' } } }) as unknown as ResolvedCall;
    let given: KeptSandbox[] = [];
    parts.keeper = async (k) => {
      steps.push('keeper');
      given = k;
      return { pid: 4242, held: ['session:kept'] };
    };
    parts.log = new Logger((ns, msg, record) => void lines.push(`${record?.level ?? '?'} ${ns} ${msg}`));
    await closeParts(parts, 0);
    expect(given).toEqual([{ scope: { tenant: 't', profile: 'p', session: 'ref-session:kept' }, digest: 'session:kept', key: 'session:kept' }]);
    expect(steps.indexOf('keeper')).toBeLessThan(steps.indexOf('shells'));
    expect(steps.indexOf('keeper')).toBeLessThan(steps.indexOf('egress'));
    expect(lines.filter((l) => l.includes('egress proxy'))).toEqual([
      'info berth:egress sandbox session:kept: a background job started in it may still run; berth process 4242 keeps its egress proxy until no job is left there',
    ]);
  });

  it('each kept sandbox\'s listening socket goes to the keeper with it; where the keeper serves it, this process stops accepting on it, before the shells and the rest of egress close', async () => {
    const kept = withJobs('session:kept', true);
    const refused = withJobs('session:refused', true);
    const anew = withJobs('session:anew', true);
    const { parts, steps } = closing(Promise.resolve());
    parts.lives.all = () => [kept, refused, anew];
    parts.egress.holds = () => true;
    parts.egress.heldCall = (ref) => ({ scope: { tenant: 't', profile: 'p', session: ref } }) as unknown as ResolvedCall;
    parts.egress.listenerFor = (ref) => (ref === 'ref-session:anew' ? undefined : { ref, fd: ref === 'ref-session:kept' ? 21 : 22, ns: `net:[${ref}]`, holder: '1:2:h' });
    const stopped: string[] = [];
    parts.egress.stopAccepting = (ref) => {
      stopped.push(ref);
      steps.push(`stop ${ref}`);
    };
    let given: KeptSandbox[] = [];
    parts.keeper = async (k) => {
      steps.push('keeper');
      given = k;
      return { pid: 4242, held: ['session:kept', 'session:anew'], serving: ['session:kept'] };
    };
    await closeParts(parts, 0);
    expect(given.map((k) => k.listener)).toEqual([
      { ref: 'ref-session:kept', fd: 21, ns: 'net:[ref-session:kept]', holder: '1:2:h' },
      { ref: 'ref-session:refused', fd: 22, ns: 'net:[ref-session:refused]', holder: '1:2:h' },
      undefined,
    ]);
    // The sandbox the keeper could not hold, and the one it holds without serving a passed socket
    // (it listens anew once this process lets go), are served here until this process's egress closes.
    expect(stopped).toEqual(['ref-session:kept']);
    expect(steps.indexOf('stop ref-session:kept')).toBeGreaterThan(steps.indexOf('keeper'));
    expect(steps.indexOf('stop ref-session:kept')).toBeLessThan(steps.indexOf('shells'));
    expect(steps.indexOf('stop ref-session:kept')).toBeLessThan(steps.indexOf('egress'));
  });

  /** The close's egress lines for one sandbox with a job, handed to `keeper`. */
  async function egressLinesWith(keeper: ClosingParts['keeper']): Promise<string[]> {
    const lines: string[] = [];
    const { parts } = closing(Promise.resolve());
    const kept = withJobs('session:kept', true);
    parts.lives.all = () => [kept];
    parts.egress.holds = () => true;
    parts.egress.heldCall = () => ({ scope: { tenant: 't', profile: 'p' } }) as unknown as ResolvedCall;
    parts.keeper = keeper;
    parts.log = new Logger((ns, msg, record) => void lines.push(`${record?.level ?? '?'} ${ns} ${msg}`));
    await closeParts(parts, 0);
    return lines.filter((l) => l.includes('egress proxy'));
  }

  it('a keeper that cannot start: the warning says why and that the job is left without network', async () => {
    expect(await egressLinesWith(() => Promise.reject(new Error('spawn node ENOENT')))).toEqual([
      expect.stringMatching(/^warn berth:egress sandbox session:kept: .* which ends now \(no keeper process could start: spawn node ENOENT\): such a job has no network from here on/),
    ]);
  });

  it('a sandbox the keeper could not hold is warned of, naming the keeper and its log', async () => {
    expect(await egressLinesWith(() => Promise.resolve({ pid: 77, held: [] }))).toEqual([
      expect.stringMatching(/^warn berth:egress sandbox session:kept: .* which ends now \(the keeper process 77 could not hold it; its log is keeper.log in the berth home\): such a job has no network/),
    ]);
  });
});
