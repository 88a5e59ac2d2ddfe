import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { PolicyRefusedError } from '../../src/errors.js';
import type { CallScopeInput } from '../../src/scope/call-scope.js';
import {
  containerFor,
  containerState,
  describeContainers,
  describeDocker,
  docker,
  dockerConfig,
  installs,
  type TestInstall,
  dockerSuiteHooks,
} from '../helpers/docker-e2e.js';

/*
 * The issue-3 matrix through the library (Broker) against the real engine: scope isolation,
 * mounts, the two reported bugs, close, out-of-band removal. Each test has its own BERTH_HOME
 * (installation id); afterEach removes every container labelled with it.
 */

const reg = installs('berth-dbroker-');

/** Writes a token file in `writer`'s sandbox and reads it from `reader`'s; returns what the reader saw. */
async function crossRead(
  broker: Broker,
  writer: CallScopeInput,
  reader: CallScopeInput,
): Promise<{ visible: boolean; sameHost: boolean; writerKey: string; readerKey: string }> {
  const token = `t${Math.random().toString(16).slice(2, 10)}`;
  const w = await broker.exec(writer, `echo ${token} > /workspace/probe-${token}; hostname`);
  expect(w.exitCode, w.output).toBe(0);
  const r = await broker.exec(reader, `cat /workspace/probe-${token} 2>/dev/null; echo "host=$(hostname)"`);
  const visible = r.stdout.startsWith(`${token}\n`);
  return { visible, sameHost: r.stdout.endsWith(`host=${w.stdout.trim()}\n`), writerKey: w.sandboxKey, readerKey: r.sandboxKey };
}

async function keysOf(t: TestInstall): Promise<string[]> {
  return (await t.containers()).map((c) => c.labels['berth.key'] ?? '?').sort();
}

describeDocker('broker on the real docker engine', () => {
  dockerSuiteHooks(reg);

  it('scope: session — one container per session; a session sees only its own files', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ scope: 'session', persistent: false }));
    const other = await crossRead(b, { session: 'a' }, { session: 'b' });
    expect(other).toMatchObject({ visible: false, sameHost: false, writerKey: 'session:a', readerKey: 'session:b' });
    const self = await crossRead(b, { session: 'a' }, { session: 'a' });
    expect(self).toMatchObject({ visible: true, sameHost: true });
    expect(await keysOf(t), describeContainers(await t.containers())).toEqual(['session:a', 'session:b']);
  });

  it('scope: task — a task shares across sessions, two tasks never share', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ scope: 'task', persistent: false }));
    const same = await crossRead(b, { session: 's1', task: 't1' }, { session: 's2', task: 't1' });
    expect(same).toMatchObject({ visible: true, sameHost: true, writerKey: 't1', readerKey: 't1' });
    const other = await crossRead(b, { session: 's1', task: 't1' }, { session: 's1', task: 't2' });
    expect(other).toMatchObject({ visible: false, sameHost: false, readerKey: 't2' });
    expect(await keysOf(t)).toEqual(['t1', 't2']);
  });

  it('scope: user — one sandbox per end user across sessions; a call without a user is refused', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ scope: 'user', persistent: false }));
    const same = await crossRead(b, { user: 'telegram:1', session: 'x' }, { user: 'telegram:1', session: 'y' });
    expect(same).toMatchObject({ visible: true, sameHost: true, writerKey: 'user:telegram:1' });
    const other = await crossRead(b, { user: 'telegram:1', session: 'x' }, { user: 'telegram:2', session: 'x' });
    expect(other).toMatchObject({ visible: false, sameHost: false, readerKey: 'user:telegram:2' });
    await expect(b.exec({ session: 'x' }, 'true')).rejects.toBeInstanceOf(PolicyRefusedError);
    expect(await keysOf(t)).toEqual(['user:telegram:1', 'user:telegram:2']);
  });

  it('scope: profile — sessions of one profile share, two profiles never do', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ scope: 'profile' }));
    const same = await crossRead(b, { profile: 'alpha', session: '1' }, { profile: 'alpha', session: '2' });
    expect(same).toMatchObject({ visible: true, sameHost: true, writerKey: 'profile:alpha' });
    const other = await crossRead(b, { profile: 'alpha', session: '1' }, { profile: 'beta', session: '1' });
    expect(other).toMatchObject({ visible: false, sameHost: false, readerKey: 'profile:beta' });
    expect(await keysOf(t)).toEqual(['profile:alpha', 'profile:beta']);
  });

  it('scope: shared — one sandbox for every profile and session of a tenant; another tenant gets its own', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ scope: 'shared', sharedKey: 'team' }));
    const same = await crossRead(b, { profile: 'alpha', session: '1' }, { profile: 'beta', session: '2', user: 'telegram:9' });
    expect(same).toMatchObject({ visible: true, sameHost: true, writerKey: 'shared:team', readerKey: 'shared:team' });
    const tenant = await crossRead(b, { profile: 'alpha', session: '1' }, { tenant: 'other', profile: 'alpha', session: '1' });
    expect(tenant).toMatchObject({ visible: false, sameHost: false, readerKey: 'shared:team' });
    expect(await keysOf(t)).toEqual(['shared:team', 'shared:team']);
  });

  it('auto, persistent: false — sessions are isolated from each other and from the default sandbox', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: false }));
    const sessions = await crossRead(b, { session: 'a' }, { session: 'b' });
    expect(sessions).toMatchObject({ visible: false, sameHost: false, writerKey: 'session:a', readerKey: 'session:b' });
    const dflt = await crossRead(b, {}, { session: 'a' });
    expect(dflt).toMatchObject({ visible: false, sameHost: false, writerKey: 'default' });
    const labels = Object.fromEntries((await t.containers()).map((c) => [c.labels['berth.key'], c.labels['berth.lifecycle']]));
    expect(labels).toEqual({ 'session:a': 'ephemeral', 'session:b': 'ephemeral', default: 'persistent' });
  });

  it('auto, persistent: true + sharedKey — shared:K across profiles, but a named user still gets their own', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: true, sharedKey: 'k' }));
    const profiles = await crossRead(b, { profile: 'alpha', session: '1' }, { profile: 'beta', session: '2' });
    expect(profiles).toMatchObject({ visible: true, sameHost: true, writerKey: 'shared:k', readerKey: 'shared:k' });
    const user = await crossRead(b, { profile: 'alpha', session: '1' }, { profile: 'alpha', session: '1', user: 'telegram:7' });
    expect(user).toMatchObject({ visible: false, sameHost: false, readerKey: 'user:telegram:7' });
    expect(await keysOf(t)).toEqual(['shared:k', 'user:telegram:7']);
  });

  it('20 sessions created at once get 20 containers, 20 hostnames, and see only their own files', async () => {
    const t = reg.track();
    // 20 memory limits of 2 GiB (and disk bounds of 10 GiB) may add up to more than a host has: the tenant's bounds are raised.
    const b = await t.open(dockerConfig({ persistent: false, limits: { memoryMb: 20 * 2048, diskMb: 20 * 10_240 } }));
    const ids = Array.from({ length: 20 }, (_, i) => `c${i}`);
    const first = await Promise.all(ids.map((s) => b.exec({ session: s }, `echo ${s} > /workspace/owner-${s}; hostname`)));
    const list = await t.containers();
    const where = describeContainers(list);
    expect(first.map((r) => r.exitCode), where).toEqual(ids.map(() => 0));
    expect(list, where).toHaveLength(20);
    expect(new Set(list.map((c) => c.labels['berth.identity'])).size, where).toBe(20);
    expect(new Set(first.map((r) => r.stdout.trim())).size, where).toBe(20);
    // Each session ran in the container labelled with its own key (docker's hostname is the short id).
    const idByKey = new Map(list.map((c) => [c.labels['berth.key'], c.id.slice(0, 12)]));
    expect(first.map((r) => r.stdout.trim()), where).toEqual(ids.map((s) => idByKey.get(`session:${s}`)));
    const second = await Promise.all(ids.map((s) => b.exec({ session: s }, 'ls -A /workspace')));
    expect(second.map((r) => r.stdout), where).toEqual(ids.map((s) => `owner-${s}\n`));
  }, 120_000);

  it('an attached workspace is bound at /workspace both ways; a session without one gets none', async () => {
    const t = reg.track();
    const ws = t.userDir('project');
    writeFileSync(join(ws, 'host.txt'), 'from-host\n');
    const b = await t.open(dockerConfig({ persistent: false, workspace: { mount: true } }));
    const scope: CallScopeInput = { session: 'm', workspace: { path: ws, source: 'session' } };
    expect(b.explain(scope)).toMatchObject({ mount: ws, sandboxKey: 'session:m' });
    const r = await b.exec(scope, 'cat /workspace/host.txt && echo from-inside > /workspace/inside.txt && pwd');
    expect(r).toMatchObject({ exitCode: 0, stdout: 'from-host\n/workspace\n' });
    expect(readFileSync(join(ws, 'inside.txt'), 'utf8')).toBe('from-inside\n');
    const bare = await b.exec({ session: 'n' }, 'ls -A /workspace');
    expect(bare).toMatchObject({ exitCode: 0, stdout: '' });
  });

  it('a shared sandbox asked for a different mount than it has is an error saying so', async () => {
    const t = reg.track();
    const a = t.userDir('a');
    const other = t.userDir('b');
    const b = await t.open(dockerConfig({ workspace: { mount: true } }));
    const first = await b.exec({ workspace: { path: a, source: 'session' } }, 'ls -A /workspace; true');
    expect(first.sandboxKey).toBe('default');
    const err = await b.exec({ workspace: { path: other, source: 'session' } }, 'true').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PolicyRefusedError);
    expect((err as Error).message).toContain(a);
    expect((err as Error).message).toContain(other);
    expect((err as Error).message).toMatch(/fixed when/);
    // The same workspace, or none, still uses it.
    expect((await b.exec({ workspace: { path: a, source: 'session' } }, 'true')).exitCode).toBe(0);
    expect((await b.exec({}, 'true')).exitCode).toBe(0);
  });

  it('bug 1: a session never inherits the mount a process-level cwd gave the default sandbox', async () => {
    const t = reg.track();
    const dirA = t.userDir('dirA');
    writeFileSync(join(dirA, 'only-in-a.txt'), 'a\n');
    const b = await t.open(dockerConfig({ persistent: false, workspace: { mount: true } }));
    const launch = { path: dirA, source: 'process' as const };
    const first = await b.exec({ workspace: launch }, 'ls -A /workspace');
    expect(first).toMatchObject({ sandboxKey: 'default', stdout: 'only-in-a.txt\n' });
    expect(b.explain({ session: 's2', workspace: launch })).toMatchObject({ sandboxKey: 'session:s2', mount: null });
    const second = await b.exec({ session: 's2', workspace: launch }, 'ls -A /workspace; pwd');
    expect(second).toMatchObject({ exitCode: 0, sandboxKey: 'session:s2', stdout: '/workspace\n' });
    const c = await containerFor(t.installation, 'session:s2');
    const mounts = (await docker.getContainer(c.id).inspect()).Mounts.map((m) => m.Source);
    expect(mounts, `container ${c.id.slice(0, 12)}`).not.toContain(dirA);
  });

  it('bug 2: a host cwd recorded on local never makes a docker command cd into it; one under the mount maps to /workspace', async () => {
    const t = reg.track();
    const proj = t.userDir('proj');
    const session = { session: 's' };
    const attached = { session: 'w', workspace: { path: proj, source: 'session' as const } };
    {
      // The CLI's broker: detached sessions, so the cwd records survive this process.
      const local = await t.open(parseConfig({ backend: 'local', persistent: false }), { holdSessions: false });
      const r = await local.exec(session, 'mkdir -p sub && cd sub && pwd');
      expect(r.stdout.trim()).toMatch(new RegExp(`^${t.home}/.*/sub$`));
      const w = await local.exec(attached, 'mkdir -p deep/er && cd deep/er');
      expect(w.cwd).toBe(join(proj, 'deep/er'));
      await local.close();
    }
    const b = await t.open(dockerConfig({ persistent: false, workspace: { mount: true } }));
    expect(b.explain(session).cwd).toBe('/workspace');
    const pwd = await b.exec(session, 'pwd');
    expect(pwd).toMatchObject({ exitCode: 0, stdout: '/workspace\n', cwd: '/workspace' });
    expect(pwd.sandboxRecreated).toBeUndefined();
    expect(b.explain(attached).cwd).toBe('/workspace/deep/er');
    const mapped = await b.exec(attached, 'pwd');
    expect(mapped).toMatchObject({ exitCode: 0, stdout: '/workspace/deep/er\n' });
    // The sessions moved to docker: their ephemeral local dirs are retired, not leaked.
    expect(readdirSync(join(t.home, 'sandboxes', 'local'))).toEqual([]);
  });

  it('close removes the ephemeral container and keeps the persistent one with its files; shutdown removes held ones', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: false }));
    await b.exec({ session: 'eph' }, 'echo x > /workspace/f');
    await b.exec({}, 'echo kept > /workspace/keep');
    const eph = await containerFor(t.installation, 'session:eph');
    const dflt = await containerFor(t.installation, 'default');
    expect(await b.closeSession({ session: 'eph' })).toEqual({ removed: ['session:eph'], kept: [], wasOpen: true });
    expect(await containerState(eph.id), `container ${eph.id.slice(0, 12)} should be gone`).toBeUndefined();
    const dockerDirs = join(t.home, 'sandboxes', 'docker');
    // (Disk images, where berth makes them, live in `.disks` beside the sandbox dirs; each
    // container's stdio dir in `.stdio`, named by its label, and removed with it.)
    expect(readdirSync(dockerDirs).filter((n) => n !== '.disks' && n !== '.stdio')).toEqual(['default']);
    const stdioOf = (c: { labels: Record<string, string> }): string => c.labels['berth.stdio'] ?? 'none';
    expect(readdirSync(join(dockerDirs, '.stdio'))).toEqual([stdioOf(dflt)]);
    expect(await b.closeSession({})).toEqual({ removed: [], kept: ['default'], wasOpen: true });
    expect((await containerState(dflt.id))?.running, `container ${dflt.id.slice(0, 12)}`).toBe(true);
    expect(readFileSync(join(dockerDirs, 'default', 'workspace', 'keep'), 'utf8')).toBe('kept\n');

    await b.exec({ session: 'held' }, 'true');
    const held = await containerFor(t.installation, 'session:held');
    await b.close();
    expect(await containerState(held.id), `container ${held.id.slice(0, 12)} should be gone`).toBeUndefined();
    expect(readdirSync(join(dockerDirs, '.stdio'))).toEqual([stdioOf(dflt)]);
    expect((await containerState(dflt.id))?.running).toBe(true);
    expect(readFileSync(join(dockerDirs, 'default', 'workspace', 'keep'), 'utf8')).toBe('kept\n');
  });

  it('removing a persistent sandbox (berth rm) deletes its container and host dir', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: true }));
    await b.exec({}, 'echo x > /workspace/f');
    const c = await containerFor(t.installation, 'default');
    const dir = join(t.home, 'sandboxes', 'docker', 'default');
    expect(existsSync(join(dir, 'workspace', 'f'))).toBe(true);
    expect(await b.removeSandboxOf({})).toBe(true);
    expect(await containerState(c.id)).toBeUndefined();
    expect(existsSync(dir)).toBe(false);
  });

  it.each([
    { lifecycle: 'ephemeral', config: { persistent: false }, scope: { session: 'oob' } },
    { lifecycle: 'persistent', config: { persistent: true }, scope: { session: 'oob' } },
  ])('a $lifecycle container removed out of band is recreated once, and the result says so once', async ({ config, scope }) => {
    const t = reg.track();
    const b = await t.open(dockerConfig(config));
    const first = await b.exec(scope, 'echo before > /tmp/marker; hostname');
    expect(first.sandboxRecreated).toBeUndefined();
    const before = await containerFor(t.installation, first.sandboxKey);
    await docker.getContainer(before.id).remove({ force: true });
    const second = await b.exec(scope, 'cat /tmp/marker 2>/dev/null || echo fresh; hostname');
    const after = await containerFor(t.installation, first.sandboxKey);
    const where = `old ${before.id.slice(0, 12)}, new ${after.id.slice(0, 12)}`;
    expect(second, where).toMatchObject({ exitCode: 0, sandboxRecreated: true });
    expect(second.stdout, where).toBe(`fresh\n${after.id.slice(0, 12)}\n`);
    expect(after.id).not.toBe(before.id);
    const third = await b.exec(scope, 'true');
    expect(third.exitCode).toBe(0);
    expect(third.sandboxRecreated, where).toBeUndefined();
  });

  it('a persistent container stopped out of band is started again on the next call, with its files, and is not "recreated"', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: true }));
    expect((await b.exec({}, 'echo kept > /workspace/keep')).exitCode).toBe(0);
    const c = await containerFor(t.installation, 'default');
    await docker.getContainer(c.id).stop({ t: 1 });
    expect(await containerState(c.id)).toMatchObject({ running: false });
    const r = await b.exec({}, 'cat /workspace/keep; hostname');
    expect(r, `container ${c.id.slice(0, 12)}`).toMatchObject({ exitCode: 0, stdout: `kept\n${c.id.slice(0, 12)}\n` });
    expect(r.sandboxRecreated).toBeUndefined();
    expect((await containerState(c.id))?.running).toBe(true);
  });
});
