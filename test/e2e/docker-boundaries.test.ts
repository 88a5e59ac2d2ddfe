import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { networkName } from '../../src/backends/docker/network-shards.js';
import type { Broker } from '../../src/broker/broker.js';
import { guardedBridgeName } from '../../src/egress/guarded-bridges.js';
import type { CallScopeInput } from '../../src/scope/call-scope.js';
import {
  containerFor,
  describeContainers,
  describeDocker,
  docker,
  dockerConfig,
  dockerConfigYaml,
  dockerSuiteHooks,
  installs,
  networksOf,
  type TestInstall,
  waitFor,
} from '../helpers/docker-e2e.js';
import { runBerth } from '../helpers/cli.js';

/*
 * Trust boundaries on the docker backend, through the library: which tenants a volume reaches, sandboxes
 * that cannot reach each other over the network, setuid files planted in host binds, and the
 * per-sandbox disk bound.
 */

const reg = installs('berth-dtrust-');

/** The sandbox's address on its (only) network, from the engine. */
async function ipOf(t: TestInstall, key: string, tenant?: string): Promise<string> {
  const all = await t.containers();
  const c = all.find((x) => x.labels['berth.key'] === key && (tenant === undefined || x.labels['berth.tenant'] === tenant));
  if (c === undefined) throw new Error(`no container for ${key}: ${describeContainers(all)}`);
  const info = await docker.getContainer(c.id).inspect();
  const ips = Object.values(info.NetworkSettings.Networks).map((n) => n.IPAddress).filter((ip) => ip !== '');
  if (ips.length !== 1) throw new Error(`container ${c.id.slice(0, 12)} has addresses ${JSON.stringify(ips)}`);
  return ips[0]!;
}

/** One HTTP GET with busybox nc (busybox wget crashes in the minimal image); its first line, or ''. */
function httpGet(ip: string): string {
  return `printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 2 ${ip} 8080 2>/dev/null | head -n 1; true`;
}

async function startHttpd(b: Broker, scope: CallScopeInput): Promise<void> {
  const r = await b.exec(scope, 'mkdir -p /tmp/www && echo hello > /tmp/www/index.html && httpd -p 8080 -h /tmp/www && echo started');
  expect(r, r.output).toMatchObject({ exitCode: 0, stdout: 'started\n' });
}

describeDocker('trust boundaries on the real docker engine', () => {
  dockerSuiteHooks(reg);

  it('a volume reaches only the tenants in its audience; "*" reaches every tenant', async () => {
    const t = reg.track();
    const own = t.userDir('vol-acme');
    const everyone = t.mkdir('vol-all');
    const ws = t.userDir('vol-ws');
    writeFileSync(join(own, 'f'), 'acme-only\n');
    writeFileSync(join(everyone, 'f'), 'for-all\n');
    writeFileSync(join(ws, 'f'), 'acme-workspace\n');
    const b = await t.open(dockerConfig({
      persistent: true,
      docker: {
        volumes: [
          { source: own, target: '/data/acme', tenants: ['acme'] },
          { source: everyone, target: '/data/all', readOnly: true, tenants: '*' },
          { source: ws, target: '/workspace', tenants: ['acme'] },
        ],
      },
    }));
    const probe = 'cat /data/acme/f 2>&1; cat /data/all/f; cat /workspace/f 2>&1; true';
    const a = await b.exec({ tenant: 'acme' }, probe);
    expect(a.stdout).toBe('acme-only\nfor-all\nacme-workspace\n');
    const g = await b.exec({ tenant: 'globex' }, probe);
    expect(g.stdout).toBe('cat: can\'t open \'/data/acme/f\': No such file or directory\nfor-all\ncat: can\'t open \'/workspace/f\': No such file or directory\n');
    // The other tenant's persistent sandbox got its own /workspace, and is adopted without a mount complaint.
    const again = await b.exec({ tenant: 'globex' }, 'echo ok');
    expect(again.stdout).toBe('ok\n');
  });

  it('a server in one sandbox is reachable from no other sandbox, of the same tenant or another', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: false }));
    const server: CallScopeInput = { tenant: 'acme', session: 'server' };
    await startHttpd(b, server);
    const ip = await ipOf(t, 'session:server', 'acme');
    // Positive control: the server answers inside its own sandbox.
    expect((await b.exec(server, httpGet(ip))).stdout).toBe('HTTP/1.1 200 OK\r\n');
    const sameTenant = await b.exec({ tenant: 'acme', session: 'neighbour' }, httpGet(ip));
    expect(sameTenant.stdout, `acme:neighbour reached ${ip}`).toBe('');
    const otherTenant = await b.exec({ tenant: 'globex', session: 'intruder' }, httpGet(ip));
    expect(otherTenant.stdout, `globex:intruder reached ${ip}`).toBe('');

    // One berth network per tenant, labelled like its containers, inter-container traffic off,
    // egress (masquerade) on; no IPv6 inside (so no link-local path around the IPv4 rules).
    const nets = await networksOf(t.installation);
    expect(nets.map((n) => n.labels['berth.tenant']).sort()).toEqual(['acme', 'globex']);
    for (const n of nets) {
      expect(n.name).toBe(networkName(t.installation, n.labels['berth.tenant']!, 0));
      expect(n.labels).toMatchObject({ 'berth.managed': 'true', 'berth.installation': t.installation, 'berth.network-shard': '0' });
      expect(n.options).toEqual({
        'com.docker.network.bridge.enable_icc': 'false',
        'com.docker.network.bridge.enable_ip_masquerade': 'true',
        // The prefix the host guard matches (egress/docker-guard.ts).
        'com.docker.network.bridge.name': guardedBridgeName(n.name),
      });
      const info = await docker.getNetwork(n.id).inspect();
      expect({ driver: info.Driver, internal: info.Internal, ipv6: info.EnableIPv6 }).toEqual({ driver: 'bridge', internal: false, ipv6: false });
    }
    expect((await b.exec({ tenant: 'globex', session: 'intruder' }, 'cat /proc/net/if_inet6 | wc -l')).stdout.trim()).toBe('0');

    // Closing the sessions removes the sandboxes; the reaper then removes the networks.
    for (const scope of [server, { tenant: 'acme', session: 'neighbour' }, { tenant: 'globex', session: 'intruder' }]) await b.closeSession(scope);
    expect(await t.containers()).toEqual([]);
    await b.reapers.reapOrphans();
    expect(await networksOf(t.installation)).toEqual([]);
  });

  it('closing a broker removes the tenant networks its last sandboxes left, and keeps one a persistent sandbox still uses', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: false }), { reap: false });
    await b.exec({ tenant: 'acme', session: 'gone' }, 'true');
    await b.closeSession({ tenant: 'acme', session: 'gone' });
    // No reaper in this one either: its first engine use would sweep idle networks.
    const keeper = await t.open(dockerConfig({ persistent: true }), { reap: false });
    await keeper.exec({ tenant: 'globex', session: 'stays' }, 'true');
    expect((await networksOf(t.installation)).map((n) => n.labels['berth.tenant']).sort()).toEqual(['acme', 'globex']);
    // No reaper pass in between: the close itself takes the network nobody uses (a deleted
    // BERTH_HOME would otherwise leave it on the engine for good).
    await b.close();
    await keeper.close();
    expect((await networksOf(t.installation)).map((n) => n.labels['berth.tenant'])).toEqual(['globex']);
    expect((await t.containers()).length).toBe(1);
  });

  it('network none still has no network, and makes no berth network', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: false, docker: { network: 'none' } }));
    const r = await b.exec({ session: 'offline' }, 'tail -n +3 /proc/net/dev | cut -d: -f1');
    expect(r.stdout.split('\n').map((x) => x.trim()).filter(Boolean)).toEqual(['lo']);
    expect(await networksOf(t.installation)).toEqual([]);
  });

  it('two processes creating the first sandboxes of a tenant at once end with one network', async () => {
    const t = reg.track();
    // Two brokers on one BERTH_HOME: two processes of one installation, each with its own backend.
    const [p1, p2] = [await t.open(dockerConfig({ persistent: false })), await t.open(dockerConfig({ persistent: false }))];
    const runs = await Promise.all([1, 2, 3, 4].map((i) => (i % 2 ? p1 : p2).exec({ tenant: 'acme', session: `race${i}` }, 'echo ok')));
    expect(runs.map((r) => r.stdout)).toEqual(['ok\n', 'ok\n', 'ok\n', 'ok\n']);
    const nets = await networksOf(t.installation);
    expect(nets.map((n) => n.name), JSON.stringify(nets.map((n) => n.id))).toEqual([networkName(t.installation, 'acme', 0)]);
    const attached = await Promise.all((await t.containers()).map(async (c) => Object.keys((await docker.getContainer(c.id).inspect()).NetworkSettings.Networks)));
    expect(attached).toEqual([[nets[0]!.name], [nets[0]!.name], [nets[0]!.name], [nets[0]!.name]]);
  });

  it('a tenant network another process removed after this one listed it is listed again and made anew: the next sandbox still starts', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: false }), { reap: false });
    // The first makes the network; the second finds it listed (and this process keeps that list a while).
    for (const session of ['first', 'second']) {
      await b.exec({ tenant: 'acme', session }, 'true');
      await b.closeSession({ tenant: 'acme', session });
    }
    const [net] = await networksOf(t.installation);
    // Another process's reaper: the network had no container left.
    await docker.getNetwork(net!.id).remove();
    expect((await b.exec({ tenant: 'acme', session: 'third' }, 'echo ok')).stdout).toBe('ok\n');
    const now = await networksOf(t.installation);
    expect(now.map((n) => n.name)).toEqual([net!.name]);
    expect(now[0]!.id).not.toBe(net!.id);
  });

  it('a network of berth\'s name that is not this installation\'s is never joined', async () => {
    const t = reg.track();
    const name = networkName(t.installation, 'acme', 0);
    const planted = await docker.createNetwork({ Name: name, CheckDuplicate: true, Labels: { 'berth.installation': 'someone-else' } });
    try {
      const b = await t.open(dockerConfig({ persistent: false }));
      const err = await b.exec({ tenant: 'acme', session: 's' }, 'true').then(() => undefined, (e: unknown) => e);
      expect(err).toMatchObject({ code: 'policy_refused' });
      expect((err as Error).message).toContain(`network ${name}`);
      expect((err as Error).message).toContain('berth.installation=someone-else');
      expect(await t.containers()).toEqual([]);
    } finally {
      await docker.getNetwork(planted.id).remove();
    }
  });

  it('a sandbox made before tenant networks (on the default bridge) is moved onto its tenant network; a network change to none is refused', async () => {
    const t = reg.track();
    const first = await t.open(dockerConfig({}), { holdSessions: false });
    expect((await first.exec({ tenant: 'acme' }, 'true')).exitCode).toBe(0);
    await first.close();
    const c = await containerFor(t.installation, 'default');
    const own = networkName(t.installation, 'acme', 0);
    // What an older berth made: the same container on the engine's default bridge.
    await docker.getNetwork(own).disconnect({ Container: c.id, Force: true });
    await docker.getNetwork('bridge').connect({ Container: c.id });
    const later = await t.open(dockerConfig({}));
    expect((await later.exec({ tenant: 'acme' }, 'echo ok')).stdout).toBe('ok\n');
    const info = await docker.getContainer(c.id).inspect();
    expect(Object.keys(info.NetworkSettings.Networks)).toEqual([own]);

    const offline = await t.open(dockerConfig({ docker: { network: 'none' } }));
    const err = await offline.exec({ tenant: 'acme' }, 'true').then(() => undefined, (e: unknown) => e);
    expect(err).toMatchObject({ code: 'policy_refused' });
    expect((err as Error).message).toMatch(/was created with a network but its network is now "none" \(docker\.network, egress\.mode\).*berth rm/);
  });

  it('a setuid file the sandbox plants in a workspace owned by uid 1000 gives at most euid 1000 on the host', async () => {
    const t = reg.track();
    // The host user who later runs the planted file (65534) must be able to reach it.
    chmodSync(t.root, 0o755);
    const ws = t.mkdir('ws-1000');
    chownSync(ws, 1000, 1000);
    chmodSync(ws, 0o755);
    const b = await t.open(dockerConfig({ persistent: false, workspace: { mount: true } }));
    const scope: CallScopeInput = { session: 'planter', workspace: { path: ws, source: 'session' } };
    const r = await b.exec(scope, 'cp "$(command -v bash)" /workspace/x && chmod 4755 /workspace/x && echo planted; id -u');
    expect(r.stdout, r.output).toMatch(/^planted\n/);
    const planted = statSync(join(ws, 'x'));
    expect({ uid: planted.uid, setuid: (planted.mode & 0o4000) !== 0 }).toEqual({ uid: 1000, setuid: true });
    const run = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', join(ws, 'x'), '-p', '-c', 'echo "$EUID"'], { encoding: 'utf8' });
    expect(run.stdout, run.stderr).toBe('1000\n');
    expect(r.stdout).toBe('planted\n1000\n');
    // The shell still has a writable home and state dir as that user.
    const home = await b.exec(scope, 'touch /root/h && ls -d /root/.berth >/dev/null && echo ok');
    expect(home.stdout, home.output).toBe('ok\n');
  });

  it('a persistent sandbox on a uid-1000 workspace runs as 1000 with its own home handed to 1000; mixed owners are refused', async () => {
    const t = reg.track();
    const ws = t.mkdir('ws-persist');
    chownSync(ws, 1000, 1001);
    const shared = t.mkdir('vol-2000');
    chownSync(shared, 2000, 2000);
    const readOnly = t.mkdir('vol-ro-2000');
    chownSync(readOnly, 2000, 2000);
    const b = await t.open(dockerConfig({
      persistent: true,
      workspace: { mount: true },
      docker: { volumes: [{ source: readOnly, target: '/ro', readOnly: true, tenants: '*' }] },
    }));
    const r = await b.exec({ workspace: { path: ws, source: 'session' } }, 'id -u; id -g; echo x > /root/f; echo y > /workspace/g; ls -d /root/.berth');
    expect(r.stdout, r.output).toBe('1000\n1001\n/root/.berth\n');
    const dirs = readdirSync(join(t.home, 'sandboxes', 'docker')).filter((n) => n !== '.disks' && n !== '.stdio');
    expect(dirs).toEqual(['default']);
    const home = statSync(join(t.home, 'sandboxes', 'docker', 'default', 'home'));
    expect({ uid: home.uid, gid: home.gid, mode: home.mode & 0o777 }).toEqual({ uid: 1000, gid: 1001, mode: 0o700 });
    expect(statSync(join(ws, 'g')).uid).toBe(1000);

    const mixed = await t.open(dockerConfig({
      persistent: false,
      workspace: { mount: true },
      docker: { volumes: [{ source: shared, target: '/shared', tenants: '*' }] },
    }));
    const err = await mixed.exec({ session: 'mixed', workspace: { path: ws, source: 'session' } }, 'true').then(() => undefined, (e: unknown) => e);
    expect(err).toMatchObject({ code: 'policy_refused' });
    expect((err as Error).message).toContain(`the attached workspace ${ws} belongs to uid 1000`);
    expect((err as Error).message).toContain(`docker.volumes entry ${shared}:/shared belongs to uid 2000`);
    expect(await t.containers().then((l) => l.filter((c) => c.labels['berth.key'] === 'session:mixed'))).toEqual([]);
  });

  it('a sandbox created as one owner before its workspace changed owner is refused on adoption, not reused as the old one', async () => {
    const t = reg.track();
    const ws = t.userDir('ws-later');
    const first = await t.open(dockerConfig({ persistent: true, workspace: { mount: true } }), { holdSessions: false });
    expect((await first.exec({ workspace: { path: ws, source: 'session' } }, 'id -u')).stdout).toBe('1000\n');
    await first.close();
    chownSync(ws, 2000, 2000);
    const later = await t.open(dockerConfig({ persistent: true, workspace: { mount: true } }));
    const err = await later.exec({ workspace: { path: ws, source: 'session' } }, 'true').then(() => undefined, (e: unknown) => e);
    expect(err).toMatchObject({ code: 'policy_refused' });
    expect((err as Error).message).toMatch(/runs as 1000:1000 but its read-write host dirs require 2000:2000.*berth rm/);
  });

  it('a read-write host dir owned by root is never bound: the attached workspace is refused (exit 125) and nothing is created; a root-owned rw volume stops start-up', async () => {
    const t = reg.track();
    const ws = t.mkdir('root-ws');
    chmodSync(ws, 0o755);
    const b = await t.open(dockerConfig({ persistent: false, workspace: { mount: true } }));
    const scope: CallScopeInput = { session: 'planter', workspace: { path: ws, source: 'session' } };
    const err = await b.exec(scope, 'cp "$(command -v bash)" /workspace/x && chmod 4755 /workspace/x').then(() => undefined, (e: unknown) => e);
    expect(err).toMatchObject({ code: 'policy_refused' });
    expect((err as Error).message).toBe(
      `the attached workspace ${ws} is owned by root and would be bound read-write: a sandbox writing there as root could leave a ` +
        'set-uid-root program that any user of this host can run; hand the dir to an unprivileged owner (chown -R <uid>:<gid> DIR: the ' +
        'sandbox then runs as that uid), or bind it read-only',
    );
    expect(existsSync(join(ws, 'x'))).toBe(false);
    expect((await t.containers()).filter((c) => c.labels['berth.key'] === 'session:planter')).toEqual([]);

    const vol = t.mkdir('root-vol');
    const start = await t.open(dockerConfig({ docker: { volumes: [{ source: vol, target: '/data', tenants: '*' }] } })).then(() => undefined, (e: unknown) => e);
    expect(start).toMatchObject({ code: 'config_invalid' });
    expect((start as Error).message).toContain(`docker.volumes entry "${vol}:/data": ${vol} is owned by root and bound read-write`);
    // Read-only it is fine: the sandbox keeps root and cannot write there.
    const ro = await t.open(dockerConfig({ persistent: false, docker: { volumes: [{ source: vol, target: '/data', readOnly: true, tenants: '*' }] } }));
    const r = await ro.exec({ session: 'ro' }, 'id -u; touch /data/x 2>/dev/null || echo read-only');
    expect(r.stdout, r.output).toBe('0\nread-only\n');
  });

  it('a sandbox over docker.diskMb is stopped by the check; its next call fails clearly, another is unaffected', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: false, docker: { diskMb: 50 } }));
    const hog: CallScopeInput = { session: 'hog' };
    const quiet: CallScopeInput = { session: 'quiet' };
    expect((await b.exec(quiet, 'echo hi')).stdout).toBe('hi\n');
    // Into the writable layer (/tmp, home and the ephemeral workspace are tmpfs: memory, not disk).
    const w = await b.exec(hog, 'mkdir -p /data && dd if=/dev/zero of=/data/big bs=1M count=100 2>/dev/null && echo done');
    expect(w.stdout, w.output).toBe('done\n');
    const hogContainer = await containerFor(t.installation, 'session:hog');
    const stopped = await b.reapers.enforceDiskLimits();
    expect(stopped).toEqual(['session:hog']);
    expect((await docker.getContainer(hogContainer.id).inspect()).State.Running).toBe(false);
    const err = await b.exec(hog, 'echo again').then(() => undefined, (e: unknown) => e);
    expect(err).toMatchObject({ code: 'disk_limit_exceeded' });
    expect((err as Error).message).toMatch(/sandbox "session:hog" .*uses 1\d\d MiB of disk.*limit of 50 MiB \(docker\.diskMb\)/);
    expect((err as Error).message).toMatch(/berth rm/);
    expect((await b.exec(quiet, 'echo still')).stdout).toBe('still\n');
    // The check is cheap: a second pass with no activity measures nothing and stops nothing.
    expect(await b.reapers.enforceDiskLimits()).toEqual([]);
  });

  it('a command running when the check stops its sandbox fails with the disk error', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: false, docker: { diskMb: 50 } }));
    const hog: CallScopeInput = { session: 'hog' };
    expect((await b.exec(hog, 'true')).exitCode).toBe(0);
    const c = await containerFor(t.installation, 'session:hog');
    const running = b.exec(hog, 'mkdir -p /data && dd if=/dev/zero of=/data/big bs=1M count=80 2>/dev/null; sleep 60; echo finished')
      .then((r) => r, (e: unknown) => e);
    const sizeRw = async () => ((await docker.getContainer(c.id).inspect({ size: true } as never)) as unknown as { SizeRw?: number }).SizeRw ?? 0;
    expect(await waitFor(async () => (await sizeRw()) >= 80 * 1024 * 1024, 30_000)).toBe(true);
    expect(await b.reapers.enforceDiskLimits()).toEqual(['session:hog']);
    expect(await running).toMatchObject({ code: 'disk_limit_exceeded' });
  });

  it('berth\'s own dirs of a persistent sandbox count, an attached workspace does not; a later CLI process gets the error', async () => {
    const t = reg.track();
    const ws = t.userDir('big-ws');
    const settings = { scope: 'session', persistent: true, workspace: { mount: true }, docker: { diskMb: 50 } };
    t.writeConfig(dockerConfigYaml(settings));
    const b = await t.open(dockerConfig(settings));
    const attached: CallScopeInput = { session: 'attached', workspace: { path: ws, source: 'session' } };
    const own: CallScopeInput = { session: 'own' };
    const write = 'dd if=/dev/zero of=/workspace/big bs=1M count=60 2>/dev/null && echo done';
    expect((await b.exec(attached, write)).stdout).toBe('done\n');
    // Each part fits the bound (the kernel caps berth's own dirs at it where it can), the sum does not.
    const split = 'dd if=/dev/zero of=/workspace/big bs=1M count=30 2>/dev/null && mkdir -p /data && dd if=/dev/zero of=/data/big bs=1M count=30 2>/dev/null && echo done';
    expect((await b.exec(own, split)).stdout).toBe('done\n');
    expect(await b.reapers.enforceDiskLimits()).toEqual(['session:own']);
    const cli = await runBerth(['exec', '--session', 'own', '--', 'echo should-not-run'], { env: t.env, cwd: t.dir, timeoutMs: 30_000 });
    expect(cli.code, cli.stderr).toBe(125);
    expect(cli.stdout).toBe('');
    expect(cli.stderr).toMatch(/sandbox "session:own" .*uses 6\d MiB of disk \(writable layer 3\d MiB, its dirs under BERTH_HOME 3\d MiB\).*limit of 50 MiB/);
    expect(cli.stderr).toContain(join(t.home, 'sandboxes', 'docker'));
    const other = await runBerth(['exec', '--session', 'attached', '--', 'echo fine'], { env: t.env, cwd: t.dir, timeoutMs: 30_000 });
    expect(other, other.stderr).toMatchObject({ code: 0, stdout: 'fine\n' });
  });
});
