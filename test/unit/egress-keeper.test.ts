import { describe, expect, it } from 'vitest';
import { EgressKeeper, type KeptSandbox } from '../../src/broker/egress-keeper.js';
import type { LiveSandbox } from '../../src/broker/live-sandboxes.js';
import { Logger } from '../../src/logging/logger.js';

/*
 * The keeper (`berth __keep`) brings up only a sandbox that is recorded, not hibernated, and
 * running with a job in it: the pool's bring-up would create a missing one or start a stopped one.
 * A sandbox it finds with nothing to keep is reported as handled; one it cannot read is not.
 */

const K: KeptSandbox = { scope: { tenant: 't', profile: 'p', session: 's' }, digest: 'd1', key: 'session:s' };

function keeper(o: { rec?: object | undefined; running: boolean | undefined; groupsRunning?: () => boolean; acquired?: Promise<void>; shutdown?: AbortSignal }) {
  const calls: string[] = [];
  const live = {
    digest: 'd1', recreatedUnreported: false,
    sandbox: { ref: 'c1', processGroups: { commandsRunning: o.groupsRunning ?? (() => false) } },
  } as unknown as LiveSandbox;
  let held = false;
  const k = new EgressKeeper({
    resolver: { resolve: () => ({ spec: { digest: 'd1' }, binding: { sandboxKey: 'session:s' } }) } as never,
    sandboxes: { get: () => o.rec as never },
    holders: { sessionHolder: () => undefined },
    backends: { get: async () => ({ commandsRunning: async () => o.running }) } as never,
    gate: {
      run: (_call: unknown, fn: (sc: unknown) => Promise<unknown>) => fn({}),
      acquire: async () => {
        await o.acquired;
        calls.push('acquire');
        held = true;
        return live;
      },
    } as never,
    lives: { get: () => (held ? live : undefined), forget: async () => void calls.push('forget') },
    egress: {
      detach: async () => void calls.push('detach'), serves: () => true,
      inherit: (p: { ref: string; fd: number }) => void calls.push(`inherit ${p.ref} ${p.fd}`), closeInherited: () => void calls.push('close inherited'),
      servesPassed: (ref: string) => ref === 'c1',
    },
    shutdown: o.shutdown ?? new AbortController().signal,
    log: Logger.silent(),
  });
  return { k, calls };
}

describe('the egress keeper', () => {
  it.each([
    ['a sandbox no longer recorded', undefined, true],
    ['a hibernated sandbox', { ref: 'c1', hibernatedMs: 5 }, true],
    ['a sandbox whose job ended, or that is stopped or gone', { ref: 'c1', hibernatedMs: null }, false],
  ])('%s: nothing to keep, told as handled, never brought up', async (_name, rec, running) => {
    const { k, calls } = keeper({ rec, running });
    let ready: string[] | undefined;
    await k.keep([K], (held) => (ready = held));
    expect(ready).toEqual(['session:s']);
    expect(calls).toEqual(['close inherited']);
  });

  it('a sandbox whose processes cannot be read here is not kept, and not told as handled', async () => {
    const { k, calls } = keeper({ rec: { ref: 'c1', hibernatedMs: null }, running: undefined });
    let ready: string[] | undefined;
    await k.keep([K], (held) => (ready = held));
    expect(ready).toEqual([]);
    expect(calls).toEqual(['close inherited']);
  });

  it('a running sandbox with a job is held until no process is left in its groups, then let go as it is', async () => {
    let left = 2;
    const { k, calls } = keeper({ rec: { ref: 'c1', hibernatedMs: null }, running: true, groupsRunning: () => --left > 0 });
    let ready: string[] | undefined;
    await k.keep([K], (held) => (ready = held));
    expect(ready).toEqual(['session:s']);
    expect(left).toBe(0);
    expect(calls).toEqual(['acquire', 'close inherited', 'detach', 'forget']);
  }, 20_000);

  it('a passed listening socket is handed to the egress part before the sandbox is brought up (which serves it), those not served are closed before "ready", which names the sandboxes served on their passed socket', async () => {
    const { k, calls } = keeper({ rec: { ref: 'c1', hibernatedMs: null }, running: true, groupsRunning: () => false });
    await k.keep([{ ...K, listener: { ref: 'c1', fd: 7, ns: 'net:[1]', holder: 'h' } }], (held, serving) => void calls.push(`ready ${held.join()} serving ${serving.join()}`));
    expect(calls.slice(0, 4)).toEqual(['inherit c1 7', 'acquire', 'close inherited', 'ready session:s serving session:s']);
  }, 20_000);

  it('a sandbox held without a passed socket is not told as served on one', async () => {
    const { k, calls } = keeper({ rec: { ref: 'c1', hibernatedMs: null }, running: true, groupsRunning: () => false });
    await k.keep([K], (held, serving) => void calls.push(`ready ${held.join()} serving ${serving.join()}`));
    expect(calls).toContain('ready session:s serving ');
  }, 20_000);

  it('passed sockets not served yet are closed as soon as the process starts ending, not once the bring-up returns', async () => {
    const stop = new AbortController();
    let bringUp!: () => void;
    const { k, calls } = keeper({ rec: { ref: 'c1', hibernatedMs: null }, running: true, acquired: new Promise<void>((r) => (bringUp = r)), shutdown: stop.signal });
    const keeping = k.keep([{ ...K, listener: { ref: 'c1', fd: 7, ns: 'net:[1]', holder: 'h' } }]);
    await expect.poll(() => calls).toEqual(['inherit c1 7']);
    stop.abort();
    expect(calls).toEqual(['inherit c1 7', 'close inherited']);
    bringUp();
    await keeping;
    expect(calls.indexOf('acquire')).toBeGreaterThan(1);
  }, 20_000);
});
