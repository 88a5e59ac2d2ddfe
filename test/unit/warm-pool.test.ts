import { PassThrough } from 'node:stream';
import { describe, expect, it, vi } from 'vitest';
import type { Backend, PoolShape, Sandbox, SandboxSpec } from '../../src/backends/backend.js';
import type { ShellTransport } from '../../src/shell/transport.js';
import { WarmPool } from '../../src/broker/warm-pool.js';
import { StartGate } from '../../src/broker/start-gate.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import type { DockerSettings } from '../../src/backends/docker/settings.js';
import type { BerthConfig } from '../../src/setup/berth-config.js';
import { ConfigError } from '../../src/errors.js';
import { Logger } from '../../src/logging/logger.js';

/*
 * The broker's warm pool against a fake backend: what it serves, refills, never gives twice,
 * falls back on, and removes. The docker suite (docker-warm-pool.test.ts) runs it on the engine.
 */

interface FakeShell extends ShellTransport {
  end(): void;
}

function fakeShell(): FakeShell {
  let end = (): void => undefined;
  const exited = new Promise<number | null>((resolve) => (end = () => resolve(0)));
  return { stdin: new PassThrough(), stdout: new PassThrough(), stderr: new PassThrough(), exited, kill: async () => end(), end: () => end() };
}

/** A backend whose warm capability makes numbered sandboxes and records what happens to them. */
class PoolBackend {
  readonly name = 'docker';
  made: string[] = [];
  removed: string[] = [];
  claimed: Array<{ ref: string; key: string }> = [];
  shells = new Map<string, FakeShell>();
  failClaims = 0;
  private n = 0;
  readonly warm = {
    shapeOf: (s: DockerSettings) => (s.volumes.length > 0 ? { unpoolable: 'volumes are per tenant' } : { digest: `shape-${s.image}`, perTenant: s.network !== 'none' }),
    prepare: async (shape: PoolShape): Promise<Sandbox> => {
      this.n += 1;
      const ref = `ref${this.n}`;
      this.made.push(`${ref}:${shape.digest}:${shape.tenant ?? '-'}`);
      return this.sandbox(ref);
    },
    claim: async (prepared: Sandbox, spec: SandboxSpec): Promise<Sandbox> => {
      if (this.failClaims > 0) {
        this.failClaims -= 1;
        throw new Error('no such container');
      }
      this.claimed.push({ ref: prepared.ref, key: spec.identity.key });
      return prepared;
    },
  };

  async remove(ref: string): Promise<void> {
    this.removed.push(ref);
  }

  private sandbox(ref: string): Sandbox {
    const shells = this.shells;
    return {
      ref, defaultCwd: '/w', stateDir: '/w/.berth', hostDir: undefined,
      openShell: async (o: { env: Record<string, string> }) => {
        // The warden opens first (it fails here: no bash behind it), then the pre-attached bash.
        if (!shells.has(`${ref}:warden`)) {
          shells.set(`${ref}:warden`, fakeShell());
          throw new Error('no warden in a fake');
        }
        expect(o.env).toEqual({});
        const s = fakeShell();
        shells.set(ref, s);
        return s;
      },
    } as unknown as Sandbox;
  }
}

function spec(key: string, tenant = 'local', over: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    identity: { installation: 'i', tenant, profile: undefined, key }, digest: key.padEnd(64, '0'), dirName: key, ephemeral: true, mount: null, rule: 'test',
    section: config.base.docker, ...over,
  };
}

const config = parseConfig({ backend: 'docker', persistent: false, warmPool: { size: 2 }, docker: { network: 'none' } });

function pool(backend: PoolBackend | Partial<Backend>, opts: { fill?: boolean; cfg?: BerthConfig } = {}) {
  const claims: boolean[] = [];
  const warm = new WarmPool({
    config: opts.cfg ?? config, backends: { get: async () => backend as unknown as Backend }, gate: new StartGate(4), fill: opts.fill ?? true,
    observer: { poolClaimed: (o) => claims.push(o.hit) }, log: Logger.silent(),
  });
  return { warm, claims };
}

describe('WarmPool', () => {
  it('fills to size at start, serves each sandbox once, and refills after each claim', async () => {
    const b = new PoolBackend();
    const { warm, claims } = pool(b);
    await warm.start();
    await warm.settled();
    expect(b.made).toEqual(['ref1:shape-berth-sandbox:latest:-', 'ref2:shape-berth-sandbox:latest:-']);
    const [x, y] = await Promise.all([warm.claim(b as unknown as Backend, config.base, spec('a')), warm.claim(b as unknown as Backend, config.base, spec('b'))]);
    expect([x?.sandbox.ref, y?.sandbox.ref].sort()).toEqual(['ref1', 'ref2']);
    expect(x?.shell).toBe(b.shells.get(x!.sandbox.ref));
    // The pre-attached bash was told to make the shells' state dir ahead (the init then forks nothing for it).
    expect(String((b.shells.get(x!.sandbox.ref)!.stdin as PassThrough).read())).toContain("mkdir -p -- '/w/.berth/shells'");
    expect(claims).toEqual([true, true]);
    await warm.settled();
    expect(warm.view()[0]!.refs).toEqual(['ref3', 'ref4']);
    // What was claimed is never served again, also once its session is gone.
    const next = await warm.claim(b as unknown as Backend, config.base, spec('c'));
    expect(['ref1', 'ref2']).not.toContain(next?.sandbox.ref);
    await warm.close();
  });

  it('a claim that fails falls back (a miss); the failed sandbox is removed, and the next call is served', async () => {
    const b = new PoolBackend();
    const { warm, claims } = pool(b);
    await warm.start();
    await warm.settled();
    b.failClaims = 1;
    expect(await warm.claim(b as unknown as Backend, config.base, spec('a'))).toBeUndefined();
    expect(claims).toEqual([false]);
    expect(b.removed).toEqual(['ref1']);
    const ok = await warm.claim(b as unknown as Backend, config.base, spec('b'));
    expect(ok?.sandbox.ref).toBe('ref2');
    await warm.close();
  });

  it('an empty pool (its fill still under way) is a miss, and fills', async () => {
    const b = new PoolBackend();
    const { warm, claims } = pool(b);
    await warm.start();
    expect(await warm.claim(b as unknown as Backend, config.base, spec('a'))).toBeUndefined();
    expect(claims).toEqual([false]);
    await warm.settled();
    expect(warm.view()[0]!.ready).toBe(2);
    await warm.close();
  });

  it('skips a sandbox whose pre-attached bash ended (its sandbox went) and removes it', async () => {
    const b = new PoolBackend();
    const { warm } = pool(b);
    await warm.start();
    await warm.settled();
    b.shells.get('ref1')!.end();
    await new Promise((r) => setImmediate(r));
    const got = await warm.claim(b as unknown as Backend, config.base, spec('a'));
    expect(got?.sandbox.ref).toBe('ref2');
    await warm.settled();
    expect(b.removed).toContain('ref1');
    await warm.close();
  });

  it('never serves a mounted, persistent or other-shape sandbox, nor a broker that does not fill', async () => {
    const b = new PoolBackend();
    const { warm } = pool(b);
    await warm.start();
    await warm.settled();
    expect(await warm.claim(b as unknown as Backend, config.base, spec('m', 'local', { mount: '/srv/x' }))).toBeUndefined();
    expect(await warm.claim(b as unknown as Backend, config.base, spec('p', 'local', { ephemeral: false }))).toBeUndefined();
    // A shape no profile asks a pool for (a task's own image): no claim, and no pool made for it.
    const other = { ...config.base, docker: { ...config.base.docker, image: 'task-image:1' } };
    expect(await warm.claim(b as unknown as Backend, other, spec('o', 'local', { section: other.docker }))).toBeUndefined();
    await warm.settled();
    expect(warm.view()).toHaveLength(1);
    expect(b.claimed).toEqual([]);
    await warm.close();
    const off = new PoolBackend();
    const { warm: cold } = pool(off, { fill: false });
    await cold.start();
    expect(await cold.claim(off as unknown as Backend, config.base, spec('a'))).toBeUndefined();
    await cold.settled();
    expect(off.made).toEqual([]);
  });

  it('keeps a pool per tenant when its network is the tenant\'s, filled at the tenant\'s first call', async () => {
    const cfg = parseConfig({ backend: 'docker', persistent: false, warmPool: { size: 1 } });
    const b = new PoolBackend();
    const { warm } = pool(b, { cfg });
    await warm.start();
    await warm.settled();
    expect(b.made).toEqual([]);
    expect(await warm.claim(b as unknown as Backend, cfg.base, spec('a', 'acme', { section: cfg.base.docker }))).toBeUndefined();
    await warm.settled();
    expect(b.made).toEqual(['ref1:' + warm.view()[0]!.shape + ':acme']);
    expect(await warm.claim(b as unknown as Backend, cfg.base, spec('z', 'zeta', { section: cfg.base.docker }))).toBeUndefined();
    const acme = await warm.claim(b as unknown as Backend, cfg.base, spec('b', 'acme', { section: cfg.base.docker }));
    expect(acme?.sandbox.ref).toBe('ref1');
    await warm.close();
  });

  it('keeps at most 16 per-tenant pools of a shape: a new tenant drops the least recently used one', async () => {
    const cfg = parseConfig({ backend: 'docker', persistent: false, warmPool: { size: 1 } });
    const b = new PoolBackend();
    const { warm } = pool(b, { cfg });
    await warm.start();
    for (let i = 0; i < 16; i++) {
      await warm.claim(b as unknown as Backend, cfg.base, spec(`s${i}`, `t${i}`, { section: cfg.base.docker }));
      await new Promise((r) => setTimeout(r, 2));
    }
    await warm.settled();
    expect(warm.view()).toHaveLength(16);
    const t0 = warm.view().find((p) => p.tenant === 't0')!.refs[0]!;
    await warm.claim(b as unknown as Backend, cfg.base, spec('new', 'tnew', { section: cfg.base.docker }));
    await warm.settled();
    expect(warm.view()).toHaveLength(16);
    expect(warm.view().map((p) => p.tenant)).not.toContain('t0');
    expect(b.removed).toContain(t0);
    await warm.close();
  });

  it('close removes the unclaimed sandboxes, those still being made too, and keeps the claimed', async () => {
    const b = new PoolBackend();
    const { warm } = pool(b);
    await warm.start();
    await warm.settled();
    const got = await warm.claim(b as unknown as Backend, config.base, spec('a'));
    // The refill waits a little after a claim (the claimed session's start needs the CPU), then makes ref3.
    await vi.waitFor(() => expect(b.made).toHaveLength(3), { timeout: 5_000 });
    await warm.close();
    expect(b.removed.sort()).toEqual(['ref2', 'ref3']);
    expect(b.removed).not.toContain(got!.sandbox.ref);
  });

  it('a close before the refill after a claim began makes nothing more', async () => {
    const b = new PoolBackend();
    const { warm } = pool(b);
    await warm.start();
    await warm.settled();
    await warm.claim(b as unknown as Backend, config.base, spec('a'));
    await warm.close();
    expect(b.made).toHaveLength(2);
    expect(b.removed).toEqual(['ref2']);
  });

  it('tells the reapers which of its own unclaimed sandboxes it keeps: not one of a shape it has no pool of', async () => {
    const b = new PoolBackend();
    const { warm } = pool(b);
    await warm.start();
    await warm.settled();
    const shape = warm.view()[0]!.shape;
    expect(warm.keeps('ref1', shape)).toBe(true);
    expect(warm.keeps('ref9', 'stale-shape')).toBe(false);
    expect(warm.keeps('ref9', shape)).toBe(false);
    await warm.close();
  });

  it('a pool on a backend without the capability, or of settings it cannot pool, is a start-up error', async () => {
    const { warm } = pool({ name: 'local' } as Partial<Backend>);
    await expect(warm.start()).rejects.toThrow(ConfigError);
    await expect(warm.start()).rejects.toThrow(/backend "local" cannot keep a warm pool; set warmPool.size: 0 for that profile/);
    const vol = parseConfig({ backend: 'docker', persistent: false, warmPool: { size: 1 }, docker: { volumes: [{ source: '/srv/data', target: '/data', tenants: '*' }] } });
    const { warm: w2 } = pool(new PoolBackend(), { cfg: vol });
    await expect(w2.start()).rejects.toThrow(/volumes are per tenant/);
  });
});

describe('StartGate.runBackground', () => {
  it('a background start never goes ahead of a waiting foreground start', async () => {
    const gate = new StartGate(1);
    const order: string[] = [];
    let release = (): void => undefined;
    const first = gate.run(() => new Promise<void>((r) => (release = r)));
    const bg = gate.runBackground(async () => void order.push('background'));
    const fg = gate.run(async () => void order.push('foreground'));
    release();
    await Promise.all([first, bg, fg]);
    expect(order).toEqual(['foreground', 'background']);
  });

  it('never takes the last slot: a foreground start runs at once while background starts fill the rest', async () => {
    const gate = new StartGate(3);
    const releases: Array<() => void> = [];
    const started: string[] = [];
    const bgs = [1, 2, 3, 4].map((i) => gate.runBackground(() => new Promise<void>((r) => {
      started.push(`bg${i}`);
      releases.push(r);
    })));
    await new Promise((r) => setImmediate(r));
    expect(started).toEqual(['bg1', 'bg2']);
    await gate.run(async () => void started.push('fg'));
    expect(started).toEqual(['bg1', 'bg2', 'fg']);
    releases.shift()!();
    await new Promise((r) => setImmediate(r));
    expect(started).toEqual(['bg1', 'bg2', 'fg', 'bg3']);
    while (releases.length > 0 || started.length < 5) {
      releases.shift()?.();
      await new Promise((r) => setImmediate(r));
    }
    await Promise.all(bgs);
    expect(started).toEqual(['bg1', 'bg2', 'fg', 'bg3', 'bg4']);
  });

  it('takes a free slot only while no foreground start waits', async () => {
    const gate = new StartGate(2);
    const ran: string[] = [];
    await gate.runBackground(async () => void ran.push('bg'));
    expect(ran).toEqual(['bg']);
    expect(gate.queued).toBe(0);
  });
});
