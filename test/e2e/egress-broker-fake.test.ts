import { afterEach, describe, expect, it } from 'vitest';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { FakeEngine } from '../fake-backend/fake-engine.js';
import { fakeModule } from '../fake-backend/module.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * What the broker does around egress when a backend falls short, on the fake backend: a sandbox
 * whose proxy cannot listen is never handed out and leaves no claim behind, and a task override
 * never moves a profile's egress onto a backend that cannot enforce it.
 */

const engines: FakeEngine[] = [];
const brokers: Broker[] = [];
afterEach(async () => {
  for (const b of brokers.splice(0)) await b.close({ graceMs: 1_000 });
  for (const e of engines.splice(0)) await e.removeAll();
});

async function open(raw: Record<string, unknown>, traits: Record<string, unknown>): Promise<{ broker: Broker; engine: FakeEngine }> {
  const engine = new FakeEngine();
  engines.push(engine);
  const config = parseConfig(raw, undefined, { backends: BUILTIN_BACKENDS.with(fakeModule(engine, { traits: { isolation: 'container', ...traits } })) });
  const broker = await Broker.open({ config, berthHome: tempDir('berth-egress-fake-'), env: { PATH: process.env['PATH'] } });
  brokers.push(broker);
  return { broker, engine };
}

describe('egress around a backend that falls short', () => {
  it('a sandbox whose proxy cannot listen is refused, removed with its claim, and the next call fails the same way at once', async () => {
    // Claims to confine its network but gives berth no namespace to listen in.
    const { broker, engine } = await open(
      { backend: 'fake', egress: { mode: 'allowlist', allow: ['api.example.com'] } },
      { egressModes: ['open', 'allowlist', 'none'] },
    );
    await expect(broker.exec({ session: 's1' }, 'true')).rejects.toThrow(/gives no network namespace for berth's egress proxy/);
    expect(engine.all()).toEqual([]);
    const started = Date.now();
    await expect(broker.exec({ session: 's1' }, 'true')).rejects.toThrow(/gives no network namespace/);
    // Not a wait on a claim left behind (that would take 90 s and end in a timeout).
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(broker.list('local').map((s) => s.sandboxKey)).toEqual([]);
  });

  it('a task override cannot move a profile\'s egress onto a backend that cannot enforce it', async () => {
    const { broker } = await open(
      { backend: 'docker', egress: { mode: 'none' }, profiles: { other: { backend: 'ssh', ssh: { host: 'build1.example', agent: '/tmp/no-agent.sock' }, egress: { mode: 'open' } } } },
      {},
    );
    expect(() => broker.setTaskOverride({ session: 's', task: 't' }, { backend: 'ssh' }))
      .toThrow(/task "t" asks for backend "ssh", which cannot enforce profile "default"'s egress \(mode none\); use "docker"/);
  });
});
