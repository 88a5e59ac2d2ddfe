import { afterEach, describe, expect, it } from 'vitest';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import type { Sandbox } from '../../src/backends/backend.js';
import type { BackendModule } from '../../src/backends/module.js';
import { Broker } from '../../src/broker/broker.js';
import { StartGate } from '../../src/broker/start-gate.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import type { CallScopeInput } from '../../src/scope/call-scope.js';
import { tempDir } from '../helpers/temp-dir.js';
import { FakeEngine } from '../fake-backend/fake-engine.js';
import { fakeModule } from '../fake-backend/module.js';

/*
 * The broker's own rules on the fake backend, which keys like a container and lists its
 * sandboxes like an engine, with real processes: the sandbox-key rules of design §3 decide which
 * calls share files; concurrent first calls create one sandbox (in one process and across two);
 * the idle reaper removes what is idle and nothing busy.
 */

const engines: FakeEngine[] = [];
const brokers: Broker[] = [];
afterEach(async () => {
  for (const b of brokers.splice(0)) await b.close({ graceMs: 2_000 });
  for (const e of engines.splice(0)) await e.removeAll();
});

function engine(): FakeEngine {
  const e = new FakeEngine();
  engines.push(e);
  return e;
}

async function open(e: FakeEngine, raw: Record<string, unknown>, home = tempDir('berth-fake-broker-'), opts: { holdSessions?: boolean } = {}): Promise<Broker> {
  const config = parseConfig({ backend: 'fake', ...raw }, undefined, { backends: BUILTIN_BACKENDS.with(fakeModule(e)) });
  const broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'] }, ...opts });
  brokers.push(broker);
  return broker;
}

/** Whether a file written by call `a` is there for call `b`: the two share a sandbox. */
async function shareFiles(broker: Broker, a: CallScopeInput, b: CallScopeInput): Promise<boolean> {
  const name = `seen-${Math.random().toString(36).slice(2)}`;
  const w = await broker.exec(a, `touch "$HOME/${name}"`);
  expect(w.exitCode, w.output).toBe(0);
  const r = await broker.exec(b, `test -e "$HOME/${name}" && echo yes || echo no`);
  return r.stdout === 'yes\n';
}

describe('sandbox keys through the broker on the fake backend (design §3)', () => {
  const cases: { rule: string; config: Record<string, unknown>; a: CallScopeInput; b: CallScopeInput; key: string; shared: boolean }[] = [
    { rule: 'shared', config: { scope: 'shared', sharedKey: 'team' }, a: { session: 's1' }, b: { session: 's2', task: 't9' }, key: 'shared:team', shared: true },
    { rule: 'shared: tenants never share', config: { scope: 'shared', sharedKey: 'team' }, a: { session: 's1' }, b: { tenant: 'other', session: 's1' }, key: 'shared:team', shared: false },
    { rule: 'profile', config: { scope: 'profile' }, a: { profile: 'p1', session: 'x' }, b: { profile: 'p1', session: 'y' }, key: 'profile:p1', shared: true },
    { rule: 'profile: another profile', config: { scope: 'profile' }, a: { profile: 'p1' }, b: { profile: 'p2' }, key: 'profile:p1', shared: false },
    { rule: 'user', config: { scope: 'user' }, a: { user: 'telegram:1', session: 'x' }, b: { user: 'telegram:1', session: 'y' }, key: 'user:telegram:1', shared: true },
    { rule: 'user: another user', config: { scope: 'user' }, a: { user: 'telegram:1' }, b: { user: 'telegram:2' }, key: 'user:telegram:1', shared: false },
    { rule: 'session', config: { scope: 'session' }, a: { session: 's1' }, b: { session: 's2' }, key: 'session:s1', shared: false },
    { rule: 'auto:2 (a subagent follows its root task)', config: { persistent: false }, a: { task: 'root' }, b: { task: 'kid', parentTask: 'root' }, key: 'root', shared: true },
    { rule: 'auto:2 (another task)', config: { persistent: false }, a: { task: 'root' }, b: { task: 'other' }, key: 'root', shared: false },
    { rule: 'auto:3 (a user keeps one sandbox across sessions)', config: { persistent: false }, a: { user: 'slack:U1', session: 'a' }, b: { user: 'slack:U1', session: 'b' }, key: 'user:slack:U1', shared: true },
    { rule: 'auto:4 (persistent with sharedKey)', config: { persistent: true, sharedKey: 'k' }, a: { session: 's1' }, b: { session: 's2' }, key: 'shared:k', shared: true },
    { rule: 'auto:5 (not persistent: one per session)', config: { persistent: false }, a: { session: 's1' }, b: { session: 's2' }, key: 'session:s1', shared: false },
    { rule: 'defaults (auto:5): one per session', config: {}, a: { session: 's1' }, b: { session: 's2' }, key: 'session:s1', shared: false },
    { rule: 'auto:7 (persistent: sessions share the profile\'s)', config: { persistent: true }, a: { session: 's1' }, b: { session: 's2' }, key: 'default', shared: true },
  ];
  for (const c of cases) {
    it(`${c.rule}: ${c.shared ? 'one sandbox' : 'separate sandboxes'}`, async () => {
      const e = engine();
      const broker = await open(e, c.config);
      expect(broker.explain(c.a).sandboxKey).toBe(c.key);
      expect(await shareFiles(broker, c.a, c.b)).toBe(c.shared);
      expect(e.all()).toHaveLength(c.shared ? 1 : 2);
    });
  }
});

describe('claims on the fake backend', () => {
  it('concurrent first calls of one identity create one sandbox, in one process and across two', async () => {
    const e = engine();
    const home = tempDir('berth-fake-claim-');
    const one = await open(e, { persistent: false }, home);
    const two = await open(e, { persistent: false }, home);
    const calls = Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? one : two).exec({ session: 'race' }, 'echo $HOME'));
    const results = await Promise.all(calls);
    expect(results.map((r) => r.exitCode)).toEqual(Array(12).fill(0));
    expect(new Set(results.map((r) => r.stdout)).size).toBe(1);
    expect(e.all().map((c) => c.name)).toHaveLength(1);
  });
});

describe('a burst of new sessions on the fake backend', () => {
  it('creates sandboxes and starts shells at most the start gate\'s width at a time, and every session answers', async () => {
    const e = engine();
    const busy = { ensure: 0, open: 0 };
    const peak = { ensure: 0, open: 0 };
    /** Counts how many of `what` run at once around `fn`, which lasts at least 30 ms so that starts overlap. */
    const counted = async <T>(what: keyof typeof busy, fn: () => Promise<T>): Promise<T> => {
      busy[what] += 1;
      peak[what] = Math.max(peak[what], busy[what]);
      try {
        await new Promise((r) => setTimeout(r, 30));
        return await fn();
      } finally {
        busy[what] -= 1;
      }
    };
    const base = fakeModule(e);
    const module: BackendModule = {
      ...base,
      create: async (ctx) => {
        const backend = await base.create(ctx);
        const ensure = backend.ensure.bind(backend);
        backend.ensure = (spec, ref) => counted('ensure', async (): Promise<Sandbox> => {
          const sandbox = await ensure(spec, ref);
          const openShell = sandbox.openShell.bind(sandbox);
          sandbox.openShell = (o) => counted('open', () => openShell(o));
          return sandbox;
        });
        return backend;
      },
    };
    const config = parseConfig({ backend: 'fake', persistent: false }, undefined, { backends: BUILTIN_BACKENDS.with(module) });
    const broker = await Broker.open({ config, berthHome: tempDir('berth-fake-burst-'), env: { PATH: process.env['PATH'] }, holdSessions: true, startGate: new StartGate(2) });
    brokers.push(broker);
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => broker.exec({ session: `burst-${i}` }, `echo burst-${i}`)));
    expect(results.map((r) => r.stdout)).toEqual(Array.from({ length: 12 }, (_, i) => `burst-${i}\n`));
    expect(e.all()).toHaveLength(12);
    // Twelve sandboxes, each with a shell and a warden, yet never more than two starts at once.
    expect(peak).toEqual({ ensure: 2, open: 2 });
  });
});

describe('the idle reaper on the fake backend', () => {
  it('removes an idle ephemeral sandbox and keeps one whose background job still runs', async () => {
    const e = engine();
    const broker = await open(e, { persistent: false, lifecycle: { idleSeconds: 10 } }, undefined, { holdSessions: true });
    await broker.exec({ session: 'idle' }, 'true');
    await broker.jobs.start({ session: 'busy' }, 'sleep 60');
    expect(e.all()).toHaveLength(2);
    const deadline = Date.now() + 30_000;
    while (broker.list('local').some((s) => s.sandboxKey === 'session:idle') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
    expect(broker.list('local').map((s) => s.sandboxKey)).toEqual(['session:busy']);
    expect(e.all()).toHaveLength(1);
  }, 60_000);
});

describe('a tenant\'s limit on the sandboxes it holds', () => {
  it('twelve new sessions at once, across two processes, past limits.sandboxes: 5: five get a sandbox, seven a tenant_limit naming it; other tenants and a freed slot go on', async () => {
    const e = engine();
    const home = tempDir('berth-fake-quota-');
    const raw = { persistent: false, limits: { sandboxes: 5 } };
    const [a, b] = [await open(e, raw, home), await open(e, raw, home)];
    const results = await Promise.allSettled(Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? a : b).exec({ tenant: 'acme', session: `s${i}` }, 'echo ok')));
    const ok = results.filter((r) => r.status === 'fulfilled');
    const refused = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as Error & { code?: string; exitCode?: number }] : []));
    expect(ok).toHaveLength(5);
    expect(refused).toHaveLength(7);
    for (const err of refused) {
      expect(err).toMatchObject({ code: 'tenant_limit' });
      expect(err.message).toMatch(/^sandbox "session:s\d+" was not created: tenant "acme" holds 5 sandboxes, its limit \(limits\.sandboxes = 5\); close a session .* or raise limits\.sandboxes$/);
    }
    expect(e.all()).toHaveLength(5);
    expect((await a.exec({ tenant: 'globex', session: 'g' }, 'echo other')).stdout).toBe('other\n');
    const admitted = results.findIndex((r) => r.status === 'fulfilled');
    await (admitted % 2 === 0 ? a : b).closeSession({ tenant: 'acme', session: `s${admitted}` });
    expect((await b.exec({ tenant: 'acme', session: 'late' }, 'echo in')).stdout).toBe('in\n');
  });
});
