import { randomBytes } from 'node:crypto';
import { expect, it } from 'vitest';
import { DockerBackend } from '../../src/backends/docker/docker-backend.js';
import { dockerShapeOf } from '../../src/backends/docker/pool-shape.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { ConfigError } from '../../src/errors.js';
import { ServerMetrics } from '../../src/server/metrics.js';
import { runBerth } from '../helpers/cli.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';
import { describeDocker, docker, dockerConfig, dockerConfigYaml, dockerSuiteHooks, installs, waitFor, type TestInstall } from '../helpers/docker-e2e.js';

/*
 * Warm pools against the real engine: a new ephemeral session gets a container created, started
 * and with its shell attached before it asked; it is used once; the pool refills; reapers remove
 * the pools of a dead broker and of a stale shape; close leaves nothing.
 */

const reg = installs('berth-warm-');
dockerSuiteHooks(reg, stopAll);

const POOLED = { persistent: false, warmPool: { size: 2 }, docker: { network: 'none' } };

async function poolContainers(t: TestInstall): Promise<{ id: string; name: string; shape: string; owner: string }[]> {
  return (await t.containers())
    .filter((c) => c.labels['berth.pool'] !== undefined)
    .map((c) => ({ id: c.id, name: c.name, shape: c.labels['berth.pool']!, owner: c.labels['berth.pool-owner']! }));
}

/** The id of the container named `name` (a claim's rename lands while the first command runs). */
async function idByName(t: TestInstall, name: string): Promise<string> {
  let id: string | undefined;
  await waitFor(async () => (id = (await t.containers()).find((c) => c.name === name)?.id) !== undefined, 10_000, 50);
  if (id === undefined) throw new Error(`no container named ${name}`);
  return id;
}

function readyRefs(b: { warmPools(): { refs: string[] }[] }): string[] {
  return b.warmPools().flatMap((p) => p.refs);
}

describeDocker('warm pool (docker)', () => {
  it('a new session gets a pooled container whose first command runs; the pool refills; no container is given twice', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig(POOLED), { warmPool: true });
    await b.warmPoolsSettled();
    const pooled = readyRefs(b);
    expect(pooled).toHaveLength(2);
    // Pool containers carry no identity: no key, tenant or identity label.
    for (const c of await poolContainers(t)) {
      const labels = (await t.containers()).find((x) => x.id === c.id)!.labels;
      expect(labels['berth.key']).toBeUndefined();
      expect(labels['berth.tenant']).toBeUndefined();
      expect(labels['berth.identity']).toBeUndefined();
      expect(c.name).toMatch(/^berth-pool-/);
    }

    const [a, c] = await Promise.all([b.exec({ session: 'a' }, 'echo first-a; pwd'), b.exec({ session: 'c' }, 'echo first-c')]);
    expect(a.stdout).toBe('first-a\n/workspace\n');
    expect(c.stdout).toBe('first-c\n');
    const recA = b.list('local').find((s) => s.sandboxKey === 'session:a')!;
    const recC = b.list('local').find((s) => s.sandboxKey === 'session:c')!;
    // Both came from the pool, each its own container, renamed to its identity.
    const idA = await idByName(t, recA.name);
    const idC = await idByName(t, recC.name);
    expect(pooled).toContain(idA);
    expect(pooled).toContain(idC);
    expect(idA).not.toBe(idC);
    expect(recA.name).not.toMatch(/^berth-pool-/);

    await b.warmPoolsSettled();
    const refilled = readyRefs(b);
    expect(refilled).toHaveLength(2);
    expect(refilled).not.toContain(idA);
    expect(refilled).not.toContain(idC);

    // Closing a session removes its container; it never goes back to the pool.
    await b.closeSession({ session: 'a' });
    expect((await t.containers()).some((x) => x.id === idA)).toBe(false);
    const next = await b.exec({ session: 'a2' }, 'ls -A /workspace; echo done');
    expect(next.stdout).toBe('done\n');
    const idA2 = await idByName(t, b.list('local').find((s) => s.sandboxKey === 'session:a2')!.name);
    expect(idA2).not.toBe(idA);
    expect(readyRefs(b)).not.toContain(idA);
  }, 120_000);

  it("session A's env grant reaches A's commands (never on an argv) and is not visible in session B's pooled sandbox", async () => {
    const t = reg.track();
    const secret = `s3cret-${randomBytes(6).toString('hex')}`;
    const b = await t.open(dockerConfig({ ...POOLED, env: { forward: ['GH_TOKEN'] } }), {
      warmPool: true, env: { PATH: process.env['PATH'], BERTH_USER_TELEGRAM_111_GH_TOKEN: secret },
    });
    await b.warmPoolsSettled();
    const pooled = readyRefs(b);
    const a = await b.exec({ session: 'a', user: 'telegram:111' }, [
      'echo "len=${#GH_TOKEN}"',
      // The shell's tag is in bash's own environment (the warden finds its processes by it).
      'tr "\\0" "\\n" < /proc/$$/environ | grep -c "^BERTH_SHELL_TAG="',
      'for p in /proc/[0-9]*/cmdline; do tr "\\0" " " < $p; echo; done > /tmp/argv',
      'case "$(cat /tmp/argv)" in *"$GH_TOKEN"*) echo on-argv;; *) echo clean;; esac',
    ].join('; '));
    expect(a.stdout).toBe(`len=${secret.length}\n1\nclean\n`);
    const bB = await b.exec({ session: 'b', user: 'telegram:222' }, `echo "[\${GH_TOKEN-unset}]"; cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n" | grep -c -F -e ${secret} || true`);
    expect(bB.stdout).toBe('[unset]\n0\n');
    for (const key of ['user:telegram:111', 'user:telegram:222']) expect(pooled).toContain(await idByName(t, b.list('local').find((s) => s.sandboxKey === key)!.name));
  }, 120_000);

  it('a pooled session keeps its state across a replaced shell: snapshot restored, its env grant still there', async () => {
    const t = reg.track();
    const secret = `tok-${randomBytes(6).toString('hex')}`;
    const b = await t.open(dockerConfig({ ...POOLED, env: { forward: ['GH_TOKEN'] } }), {
      warmPool: true, env: { PATH: process.env['PATH'], BERTH_USER_TELEGRAM_7_GH_TOKEN: secret },
    });
    await b.warmPoolsSettled();
    const pooled = readyRefs(b);
    const scope = { session: 's', user: 'telegram:7' };
    await b.exec(scope, 'export KEEP=kept; cd /tmp; f() { echo fn-ok; }');
    expect(pooled).toContain(await idByName(t, b.list('local').find((s) => s.sandboxKey === 'user:telegram:7')!.name));
    const slow = await b.exec(scope, 'sleep 30', { timeoutSeconds: 1 });
    expect(slow.timedOut).toBe(true);
    const after = await b.exec(scope, 'echo "$KEEP ${#GH_TOKEN}"; pwd; f');
    expect(after.stdout).toBe(`kept ${secret.length}\n/tmp\nfn-ok\n`);
  }, 120_000);

  it('broker close removes its unclaimed pool containers and leaves no container', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig(POOLED), { warmPool: true });
    await b.warmPoolsSettled();
    expect(await poolContainers(t)).toHaveLength(2);
    await b.exec({ session: 'x' }, 'true');
    await b.close();
    expect(await t.containers()).toEqual([]);
  }, 120_000);

  it('berth ls counts the unclaimed pool containers and their memory; a one-shot berth exec creates none', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml(POOLED));
    const b = await t.open(dockerConfig(POOLED), { warmPool: true });
    await b.warmPoolsSettled();
    const ls = await runBerth(['ls'], { env: t.env, cwd: t.dir });
    expect(ls.stderr).toBe('');
    expect(ls.stdout).toMatch(/^pool: 2 unclaimed sandboxes \(docker\), \d+\.\d MiB$/m);
    await b.close();
    const exec = await runBerth(['exec', '--session', 'one', '--', 'echo hi'], { env: t.env, cwd: t.dir });
    expect(exec.stdout).toBe('hi\n');
    const after = await runBerth(['ls'], { env: t.env, cwd: t.dir });
    expect(after.stdout).toMatch(/^pool: 0 unclaimed sandboxes$/m);
    expect(await poolContainers(t)).toEqual([]);
  }, 120_000);

  it('the metrics count claims (hit and miss) and the pool size and ready sandboxes', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ ...POOLED, warmPool: { size: 1 } }), { warmPool: true });
    const metrics = new ServerMetrics(b);
    b.observe(metrics);
    await b.warmPoolsSettled();
    await Promise.all([b.exec({ session: 'h' }, 'true'), b.exec({ session: 'm' }, 'true')]);
    await b.warmPoolsSettled();
    const families = parsePrometheusText((await metrics.render({ inflight: 0, mcpSessions: 0 })).body);
    expect(sampleValue(families, 'berth_warm_pool_claims_total', { backend: 'docker', result: 'hit' })).toBe(1);
    expect(sampleValue(families, 'berth_warm_pool_claims_total', { backend: 'docker', result: 'miss' })).toBe(1);
    expect(sampleValue(families, 'berth_warm_pool_target', { backend: 'docker' })).toBe(1);
    expect(sampleValue(families, 'berth_warm_pool_ready', { backend: 'docker' })).toBe(1);
  }, 120_000);

  it('berth serve fills its pools, a new session over HTTP claims one, and stopping it leaves no pool container', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml(POOLED));
    const token = await createToken(t, 'acme');
    const metricsToken = await runBerth(['token', 'create', '--metrics'], { env: t.env, cwd: t.dir });
    expect(metricsToken.code, metricsToken.stderr).toBe(0);
    const server = await ServeProcess.start(t);
    // Ready: two pool containers, each with its warden attached (the main process) and its bash (an exec).
    const ready = async (): Promise<boolean> => {
      const pool = await poolContainers(t);
      if (pool.length !== 2) return false;
      const execs = await Promise.all(pool.map(async (c) => (await docker.getContainer(c.id).inspect()).ExecIDs?.length ?? 0));
      return execs.every((n) => n >= 1);
    };
    expect(await waitFor(ready, 60_000)).toBe(true);
    // The server takes them into its pool a moment after their bash runs: wait until it says it holds both.
    const serverReady = async (): Promise<number | undefined> => {
      const res = await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${metricsToken.stdout.trim()}` } });
      return sampleValue(parsePrometheusText(await res.text()), 'berth_warm_pool_ready', { backend: 'docker' });
    };
    expect(await waitFor(async () => (await serverReady()) === 2, 30_000, 100)).toBe(true);
    const before = (await poolContainers(t)).map((c) => c.id);
    const res = await server.client(token).post('/v1/exec', { session: 'h1', command: 'echo via-http' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect((res.body as { stdout: string }).stdout).toBe('via-http\n');
    // The session's container is one of the pool's, renamed to its identity.
    const claimed = async (): Promise<string[]> => (await t.containers()).filter((c) => before.includes(c.id) && !c.name.startsWith('berth-pool-')).map((c) => c.id);
    expect(await waitFor(async () => (await claimed()).length === 1, 10_000, 50)).toBe(true);
    await server.stop();
    expect(await poolContainers(t)).toEqual([]);
  }, 120_000);

  it('a one-shot broker (no warmPool option) never creates pool containers', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig(POOLED));
    const r = await b.exec({ session: 'x' }, 'echo ok');
    expect(r.stdout).toBe('ok\n');
    expect(await poolContainers(t)).toEqual([]);
    expect(b.warmPools()).toEqual([]);
  }, 120_000);

  it('the reaper removes the pool containers of a dead broker and of a stale shape; the new config makes its own', async () => {
    const t = reg.track();
    const config = dockerConfig(POOLED);
    const oldSettings = dockerConfig({ ...POOLED, docker: { network: 'none', memoryMb: 300 } }).base.docker;
    const backend = new DockerBackend({ installation: t.installation, berthHome: t.home });
    try {
      const shapeOld = dockerShapeOf(oldSettings) as { digest: string };
      // A dead broker's pool (pid 1 never started at that time), and one of this shape from a live other broker.
      const dead = await backend.warm.prepare({ digest: shapeOld.digest, section: oldSettings, tenant: undefined, owner: '1:0:dead' });
      const b = await t.open(config, { warmPool: true });
      await b.warmPoolsSettled();
      // Its start-up orphan pass removes the dead broker's pool, with no call made.
      expect(await waitFor(async () => !(await poolContainers(t)).some((c) => c.id === dead.ref), 20_000)).toBe(true);
      // A container labelled with this broker but of a shape it does not keep (its config changed).
      const stale = await backend.warm.prepare({ digest: shapeOld.digest, section: oldSettings, tenant: undefined, owner: readOwner(b) });
      const removed = await b.reapers.reapOrphans();
      const left = await poolContainers(t);
      expect(left.map((c) => c.id)).not.toContain(dead.ref);
      expect(left.map((c) => c.id)).not.toContain(stale.ref);
      expect(removed).toEqual([stale.name]);
      // The live pool is untouched, of the current shape.
      expect(left).toHaveLength(2);
      const shapeNow = (dockerShapeOf(config.base.docker) as { digest: string }).digest;
      expect(left.every((c) => c.shape === shapeNow)).toBe(true);
    } finally {
      await backend.close();
    }
  }, 120_000);

  it('a claimed pool container counts as its session sandbox for the reaper (kept while open, removed once closed)', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig(POOLED), { warmPool: true });
    await b.warmPoolsSettled();
    const pooled = readyRefs(b);
    await b.exec({ session: 'kept' }, 'true');
    const id = await idByName(t, b.list('local').find((s) => s.sandboxKey === 'session:kept')!.name);
    expect(pooled).toContain(id);
    await b.reapers.reapOrphans();
    expect((await t.containers()).some((c) => c.id === id)).toBe(true);
    const again = await b.exec({ session: 'kept' }, 'echo still');
    expect(again.stdout).toBe('still\n');
    await b.closeSession({ session: 'kept' });
    await b.reapers.reapOrphans();
    expect((await t.containers()).some((c) => c.id === id)).toBe(false);
  }, 120_000);

  it('a sandbox made from a snapshot of a claimed pool container is no pool\'s: its pool labels read as none', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig(POOLED), { warmPool: true });
    await b.warmPoolsSettled();
    const pooled = readyRefs(b);
    const src = b.session({ session: 'src' });
    expect((await src.exec('echo from-pool > /workspace/f')).exitCode).toBe(0);
    const srcId = await idByName(t, b.list('local').find((s) => s.sandboxKey === 'session:src')!.name);
    expect(pooled).toContain(srcId);
    await src.snapshots.create({ name: 'p' });
    await src.fork({ toSession: 'f', from: 'p' });
    expect((await b.exec({ session: 'f' }, 'cat /workspace/f')).stdout).toBe('from-pool\n');
    const forkId = await idByName(t, b.list('local').find((s) => s.sandboxKey === 'session:f')!.name);
    const fork = (await t.containers()).find((c) => c.id === forkId)!;
    expect(fork.labels['berth.pool'] ?? '').toBe('');
    expect(fork.labels['berth.pool-owner'] ?? '').toBe('');
    // The engine's listing (what the reapers read) says it is no pool's; the source still is its pool's.
    const backend = new DockerBackend({ installation: t.installation, berthHome: t.home });
    try {
      const managed = await backend.listManaged();
      expect(managed.find((m) => m.ref === forkId)?.pool).toBeUndefined();
      expect(managed.find((m) => m.ref === srcId)?.pool).toBeDefined();
    } finally {
      await backend.close();
    }
  }, 120_000);

  it('another broker adopts a claimed pool container by its recorded ref; a pool container nobody recorded is never adopted', async () => {
    const t = reg.track();
    const config = dockerConfig(POOLED);
    // A CLI-like broker: its session stays open after it closes.
    const b = await t.open(config, { warmPool: true, holdSessions: false });
    await b.warmPoolsSettled();
    const pooled = readyRefs(b);
    await b.exec({ session: 'cli' }, 'echo kept > /workspace/f');
    const id = await idByName(t, b.list('local').find((s) => s.sandboxKey === 'session:cli')!.name);
    expect(pooled).toContain(id);
    await b.close();
    // Its unclaimed pool containers went with it; the claimed one stayed.
    expect((await t.containers()).map((c) => c.id)).toEqual([id]);
    const b2 = await t.open(config, { holdSessions: false });
    const r = await b2.exec({ session: 'cli' }, 'cat /workspace/f');
    expect(r.stdout).toBe('kept\n');
    expect((await t.containers()).map((c) => c.id)).toEqual([id]);
    await b2.closeSession({ session: 'cli' });
    expect(await t.containers()).toEqual([]);

    // A store record naming an unclaimed pool container (not renamed to that identity) is refused.
    const backend = new DockerBackend({ installation: t.installation, berthHome: t.home });
    try {
      const section = config.base.docker;
      const shape = dockerShapeOf(section) as { digest: string };
      const loose = await backend.warm.prepare({ digest: shape.digest, section, tenant: undefined, owner: '1:0:x' });
      const spec = {
        identity: { installation: t.installation, tenant: 'local', profile: undefined, key: 'session:thief' },
        digest: 'ab'.repeat(32), dirName: 'thief', ephemeral: true, mount: null, rule: 'test', section,
      };
      await expect(backend.ensure(spec, loose.ref)).rejects.toThrow(/does not belong to sandbox "session:thief"/);
      await backend.remove(loose.ref, undefined);
    } finally {
      await backend.close();
    }
  }, 120_000);

  it('falls back to a normal create when the pool is empty', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ ...POOLED, warmPool: { size: 1 } }), { warmPool: true });
    await b.warmPoolsSettled();
    const [r1, r2, r3] = await Promise.all(['p1', 'p2', 'p3'].map((s) => b.exec({ session: s }, `echo ${s}`)));
    expect([r1!.stdout, r2!.stdout, r3!.stdout]).toEqual(['p1\n', 'p2\n', 'p3\n']);
    const names = b.list('local').filter((s) => s.sandboxKey.startsWith('session:p')).map((s) => s.name);
    expect(new Set(names).size).toBe(3);
  }, 120_000);

  it('a pool on a backend that cannot keep one is a start-up error naming the backend and the fix', async () => {
    const t = reg.track();
    const config = parseConfig({ backend: 'local', persistent: false, warmPool: { size: 1 } });
    await expect(t.open(config, { warmPool: true })).rejects.toThrow(ConfigError);
    await expect(t.open(config, { warmPool: true })).rejects.toThrow(/backend "local" cannot keep a warm pool; set warmPool.size: 0/);
  });

  it('with a network, pools are kept per tenant: filled at the tenant\'s first call, then served from', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: false, warmPool: { size: 1 } }), { warmPool: true });
    await b.warmPoolsSettled();
    expect(b.warmPools()).toEqual([]);
    await b.exec({ tenant: 'acme', session: 's1' }, 'true');
    await b.warmPoolsSettled();
    const acme = b.warmPools();
    expect(acme).toHaveLength(1);
    expect(acme[0]!.tenant).toBe('acme');
    const pooled = acme[0]!.refs[0]!;
    const net = Object.keys((await docker.getContainer(pooled).inspect()).NetworkSettings.Networks);
    const r = await b.exec({ tenant: 'acme', session: 's2' }, 'echo two');
    expect(r.stdout).toBe('two\n');
    const rec = b.list('acme').find((s) => s.sandboxKey === 'session:s2')!;
    const info = await docker.getContainer(await idByName(t, rec.name)).inspect();
    expect(info.Id).toBe(pooled);
    expect(Object.keys(info.NetworkSettings.Networks)).toEqual(net);
    // Another tenant never gets acme's pooled container.
    await b.exec({ tenant: 'zeta', session: 's1' }, 'true');
    const zeta = await docker.getContainer(await idByName(t, b.list('zeta').find((s) => s.sandboxKey === 'session:s1')!.name)).inspect();
    expect(Object.keys(zeta.NetworkSettings.Networks)).not.toEqual(net);
  }, 120_000);
});

function readOwner(b: { warmPools(): { owner: string }[] }): string {
  return b.warmPools()[0]!.owner;
}
