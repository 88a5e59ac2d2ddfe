import { volumeSettings } from '../../src/backends/docker/settings.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chown, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Sandbox } from '../../src/backends/backend.js';
import { DEFAULT_HELPER_OUTPUT_BYTES } from '../../src/backends/plumbing/exec-once.js';
import type { ShellTransport } from '../../src/shell/transport.js';
import { parseAptSources, pickMirror } from '../../src/backends/docker/apt-sources.js';
import { CAP_ADD_MASK, parseVolume, persistentName } from '../../src/backends/docker/container-spec.js';
import { DockerBackend } from '../../src/backends/docker/docker-backend.js';
import { buildImage, splitImage } from '../../src/backends/docker/image-build.js';
import { provideImage, registryHost } from '../../src/backends/docker/image-pull.js';
import { capabilitiesFromInfo, planLimits, type EngineCapabilities } from '../../src/backends/docker/limits.js';
import { Logger } from '../../src/logging/logger.js';
import {
  BackendUnavailableError,
  BerthError,
  ConfigError,
  PolicyRefusedError,
  SandboxNotFoundError,
} from '../../src/errors.js';
import {
  dockerRequired,
  dockerSettings,
  dockerStatus,
  ensureTestImage,
  TEST_IMAGE,
  removeInstallationContainers,
  testInstallation,
  testSpec,
} from '../helpers/docker.js';
import { unmountAllUnder } from '../helpers/mounts.js';

const FULL_CAPS: EngineCapabilities = {
  memoryLimit: true,
  swapLimit: true,
  cpuCfsQuota: true,
  pidsLimit: true,
  cgroupDriver: 'systemd',
  cgroupVersion: '2',
  userns: false,
  storageQuota: undefined,
};

describe('docker backend: pure parts', () => {
  it('applies defaults when the engine supports every limit', () => {
    const plan = planLimits(dockerSettings(), FULL_CAPS);
    expect(plan.errors).toEqual([]);
    expect(plan.warnings).toEqual([]);
    expect(plan.hostConfig).toEqual({
      Memory: 2048 * 1024 * 1024,
      MemorySwap: 2048 * 1024 * 1024,
      NanoCpus: 2e9,
      PidsLimit: 512,
      ShmSize: 64 * 1024 * 1024,
    });
  });

  it('an explicit limit the engine cannot apply is an error naming the key; a default one a warning', () => {
    const caps = { ...FULL_CAPS, pidsLimit: false, memoryLimit: false };
    const plan = planLimits(dockerSettings({ pidsLimit: 64 }), caps);
    expect(plan.errors).toHaveLength(1);
    expect(plan.errors[0]).toMatch(/docker\.pidsLimit is set to 64 .*remove docker\.pidsLimit/);
    expect(plan.warnings).toHaveLength(1);
    expect(plan.warnings[0]).toMatch(/cannot limit memory/);
    expect(plan.hostConfig.PidsLimit).toBeUndefined();
    expect(plan.hostConfig.Memory).toBeUndefined();
  });

  it('reads capability flags from GET /info, missing ones unsupported', () => {
    expect(capabilitiesFromInfo({ MemoryLimit: true, CgroupVersion: '1' })).toEqual({
      memoryLimit: true,
      swapLimit: false,
      cpuCfsQuota: false,
      pidsLimit: false,
      cgroupDriver: 'unknown',
      cgroupVersion: '1',
      userns: false,
      storageQuota: undefined,
    });
    const remapped = { SecurityOptions: ['name=seccomp,profile=default', 'name=userns'] };
    expect(capabilitiesFromInfo(remapped).userns).toBe(true);
    expect(capabilitiesFromInfo({ SecurityOptions: ['name=seccomp,profile=default'] }).userns).toBe(false);
  });

  it('parses volumes, image names and apt sources', () => {
    expect(parseVolume(volumeSettings('/srv/data:/data:ro'))).toEqual({ source: '/srv/data', target: '/data', readOnly: true });
    expect(parseVolume(volumeSettings('/srv/w:/workspace/'))).toEqual({ source: '/srv/w', target: '/workspace', readOnly: false });
    expect(splitImage('localhost:5000/berth/sandbox:1')).toEqual({ repo: 'localhost:5000/berth/sandbox', tag: '1' });
    expect(splitImage('localhost:5000/sandbox')).toEqual({ repo: 'localhost:5000/sandbox', tag: 'latest' });
    const deb822 = parseAptSources(
      'Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n\n' +
        'Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n',
      true,
    );
    expect(pickMirror(deb822, 'bookworm')).toBe('http://mirror.example/debian');
    const oneLine = parseAptSources('# c\ndeb [arch=amd64] http://m.example/debian bookworm main contrib\n', false);
    expect(pickMirror(oneLine, 'bookworm')).toBe('http://m.example/debian');
    expect(persistentName('ab'.repeat(32))).toBe(`berth-${'ab'.repeat(12)}`);
  });

  it('an unreachable engine is BackendUnavailableError naming the socket it tried and how to start docker', async () => {
    const docker = new Dockerode({ socketPath: '/tmp/berth-no-such-engine.sock' });
    const backend = new DockerBackend({ docker, installation: 'x', berthHome: os.tmpdir() });
    const err = await backend.check(dockerSettings()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendUnavailableError);
    expect((err as Error).message).toMatch(/unix:\/\/\/tmp\/berth-no-such-engine\.sock/);
    expect((err as Error).message).toMatch(/start the engine/);
    const ensureErr = await backend.ensure(testSpec('x'), undefined).catch((e: unknown) => e);
    expect(ensureErr).toBeInstanceOf(BackendUnavailableError);
    const buildErr = await buildImage({ docker, image: 'x:y', variant: 'minimal', force: false, onProgress: () => undefined }).catch(
      (e: unknown) => e,
    );
    expect(buildErr).toBeInstanceOf(BackendUnavailableError);
  });
});

const docker = new Dockerode();
const status = await dockerStatus(docker);
if (!status.ok) {
  if (dockerRequired()) {
    describe('docker backend against the real engine', () => {
      it('needs a reachable engine (BERTH_REQUIRE_DOCKER=1)', () => {
        throw new Error(`BERTH_REQUIRE_DOCKER=1 but ${status.reason}`);
      });
    });
  } else {
    console.warn(`skipping docker backend e2e: ${status.reason}`);
  }
}
const describeDocker = status.ok ? describe : describe.skip;
const skipReason = status.ok ? '' : ` (skipped: ${status.reason})`;

/** Read a stream to its end, bounded. */
async function readAll(stream: Readable, timeoutMs = 10_000): Promise<string> {
  const chunks: Buffer[] = [];
  stream.on('data', (c: Buffer) => chunks.push(c));
  await Promise.race([
    new Promise((resolve) => stream.once('end', resolve)),
    new Promise((_, reject) => setTimeout(() => reject(new Error(`stream did not end within ${timeoutMs} ms`)), timeoutMs).unref()),
  ]);
  return Buffer.concat(chunks).toString('utf8');
}

/** Send lines to a shell and wait for a marker on stdout. */
async function ask(shell: ShellTransport, line: string, timeoutMs = 10_000): Promise<string> {
  const marker = `__done_${Math.random().toString(16).slice(2)}__`;
  let seen = '';
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      shell.stdout.off('data', onData);
      reject(new Error(`no answer to ${JSON.stringify(line)} within ${timeoutMs} ms; got ${JSON.stringify(seen)}`));
    }, timeoutMs);
    const onData = (chunk: Buffer): void => {
      seen += chunk.toString('utf8');
      const at = seen.indexOf(`${marker}\n`);
      if (at >= 0) {
        clearTimeout(timer);
        shell.stdout.off('data', onData);
        resolve(seen.slice(0, at));
      }
    };
    shell.stdout.on('data', onData);
    shell.stdin.write(`${line}\necho ${marker}\n`);
  });
}

describeDocker(`docker backend against the real engine${skipReason}`, () => {
  const installation = testInstallation('e2e');
  const otherInstallation = testInstallation('e2e-other');
  let berthHome: string;
  let backend: DockerBackend;
  const logs: string[] = [];

  beforeAll(async () => {
    await ensureTestImage(docker);
    berthHome = await mkdtemp(path.join(os.tmpdir(), 'berth-docker-e2e-'));
    backend = new DockerBackend({ docker, installation, berthHome, log: new Logger((_ns, m) => logs.push(m)) });
  });

  afterAll(async () => {
    await backend?.close();
    const removed = [
      ...(await removeInstallationContainers(docker, installation)),
      ...(await removeInstallationContainers(docker, otherInstallation)),
    ];
    if (removed.length > 0) console.info(`cleaned up containers: ${removed.join(' ')}`);
    if (berthHome) {
      // Persistent sandboxes' disk images are mounted under it: down before the dir goes.
      unmountAllUnder(berthHome);
      await rm(berthHome, { recursive: true, force: true });
    }
  });

  /** Assertion context: which container a failure is about. */
  const at = (sandbox: Sandbox): string => `container ${sandbox.ref.slice(0, 12)} (${sandbox.name})`;

  const sh = async (sandbox: Sandbox, script: string, timeoutMs = 20_000): Promise<{ code: number; out: string; err: string }> => {
    const r = await sandbox.execOnce(['sh', '-c', script], { timeoutMs });
    return { code: r.exitCode, out: r.stdout.toString('utf8'), err: r.stderr.toString('utf8') };
  };

  it('check() passes on this engine and image', async () => {
    await backend.check(dockerSettings());
  });

  it('a persistent sandbox is created once and adopted by name, with every label', async () => {
    const spec = testSpec(installation, { key: 'default' });
    const first = await backend.ensure(spec, undefined);
    const second = await backend.ensure(spec, first.ref);
    expect(second.ref, at(first)).toBe(first.ref);
    expect(first.name).toBe(persistentName(spec.digest));
    expect(second.recreated).toBe(false);
    // A second backend (another berth process of the same installation) adopts it too.
    const otherProcess = new DockerBackend({ docker, installation, berthHome });
    expect((await otherProcess.ensure(spec, undefined)).ref, at(first)).toBe(first.ref);
    const labels = (await docker.getContainer(first.ref).inspect()).Config.Labels;
    expect(labels, at(first)).toMatchObject({
      'berth.managed': 'true',
      'berth.installation': installation,
      'berth.identity': spec.digest,
      'berth.key': 'default',
      'berth.tenant': 'local',
      'berth.profile': 'default',
      'berth.scope': 'auto:5',
      'berth.lifecycle': 'persistent',
    });
  });

  it('concurrent ensure() of one persistent spec from several processes makes exactly one container', async () => {
    const spec = testSpec(installation, { key: 'shared:race' });
    const processes = Array.from({ length: 6 }, () => new DockerBackend({ docker, installation, berthHome }));
    const sandboxes = await Promise.all(processes.map((p) => p.ensure(spec, undefined)));
    const ids = new Set(sandboxes.map((s) => s.ref));
    const found = (await backend.listManaged()).filter((m) => m.digest === spec.digest);
    expect(ids.size, [...ids].join(' ')).toBe(1);
    expect(found.map((m) => m.ref)).toEqual([...ids]);
  });

  it('a stopped persistent sandbox is restarted on ensure; stop() twice is fine', async () => {
    const spec = testSpec(installation);
    const sandbox = await backend.ensure(spec, undefined);
    await backend.stop(sandbox.ref);
    await backend.stop(sandbox.ref);
    expect((await backend.listManaged()).find((m) => m.ref === sandbox.ref)?.running, at(sandbox)).toBe(false);
    const again = await backend.ensure(spec, sandbox.ref);
    expect(again.ref).toBe(sandbox.ref);
    expect((await sh(again, 'echo up')).out, at(sandbox)).toBe('up\n');
    await backend.stop('no-such-container-berth');
  });

  it('ephemeral sandboxes get unique names, reattach only by knownRef, and restart when stopped', async () => {
    const spec = testSpec(installation, { ephemeral: true });
    const a = await backend.ensure(spec, undefined);
    const b = await backend.ensure(spec, undefined);
    expect(a.ref).not.toBe(b.ref);
    expect(a.name).not.toBe(b.name);
    expect(a.name).toMatch(new RegExp(`^berth-${spec.digest.slice(0, 16)}-[0-9a-f]{8}$`));
    expect(a.hostDir).toBeUndefined();
    const reattached = await backend.ensure(spec, a.ref);
    expect(reattached.ref, at(a)).toBe(a.ref);
    expect(reattached.recreated).toBe(false);
    await backend.stop(a.ref);
    const restarted = await backend.ensure(spec, a.ref);
    expect(restarted.ref, at(a)).toBe(a.ref);
    expect((await sh(restarted, 'echo back')).out, at(a)).toBe('back\n');
    // The record of another identity never reattaches this container.
    const other = testSpec(installation, { ephemeral: true });
    await expect(backend.ensure(other, a.ref)).rejects.toBeInstanceOf(PolicyRefusedError);
    const labels = (await docker.getContainer(a.ref).inspect()).Config.Labels;
    expect(labels['berth.lifecycle'], at(a)).toBe('ephemeral');
    // Ephemeral workspace and home are size-limited tmpfs.
    const mounts = (await sh(a, 'grep -E " /(workspace|root) " /proc/mounts')).out;
    expect(mounts, at(a)).toMatch(/tmpfs \/workspace tmpfs .*size=524288k/);
    expect(mounts, at(a)).toMatch(/tmpfs \/root tmpfs .*size=524288k/);
  });

  it('a container removed out of band is recreated once and says so', async () => {
    const eph = testSpec(installation, { ephemeral: true });
    const a = await backend.ensure(eph, undefined);
    await docker.getContainer(a.ref).remove({ force: true });
    const b = await backend.ensure(eph, a.ref);
    expect(b.recreated, at(b)).toBe(true);
    expect(b.ref).not.toBe(a.ref);

    const pers = testSpec(installation);
    const p1 = await backend.ensure(pers, undefined);
    await docker.getContainer(p1.ref).remove({ force: true });
    const p2 = await backend.ensure(pers, p1.ref);
    expect(p2.recreated, at(p2)).toBe(true);
    const p3 = await backend.ensure(pers, p2.ref);
    expect(p3.recreated, at(p3)).toBe(false);
  });

  it('a shell in a container removed out of band fails as SandboxNotFoundError (so the broker recreates it)', async () => {
    const eph = testSpec(installation, { ephemeral: true });
    const a = await backend.ensure(eph, undefined);
    await docker.getContainer(a.ref).remove({ force: true });
    await expect(a.openShell({ env: {}, cwd: '/workspace' })).rejects.toBeInstanceOf(SandboxNotFoundError);
  });

  it('a ref that is no container id (a host dir from another backend) is refused, never sent to the engine', async () => {
    const eph = testSpec(installation, { ephemeral: true });
    await expect(backend.ensure(eph, '/tmp/some/local/dir')).rejects.toMatchObject({ code: 'invalid_ref' });
    await expect(backend.remove('../../info', undefined)).rejects.toMatchObject({ code: 'invalid_ref' });
    await expect(backend.stop('a/b')).rejects.toMatchObject({ code: 'invalid_ref' });
  });

  it('persistent sandboxes bind host dirs at /workspace and /root; remove() deletes container and dir', async () => {
    const spec = testSpec(installation, { dirName: 'profile-bind' });
    const sandbox = await backend.ensure(spec, undefined);
    const hostDir = path.join(berthHome, 'sandboxes', 'docker', 'profile-bind');
    expect(sandbox.hostDir).toBe(hostDir);
    expect(existsSync(path.join(hostDir, 'workspace'))).toBe(true);
    expect(existsSync(path.join(hostDir, 'home'))).toBe(true);
    const r = await sh(sandbox, 'echo from-container > /workspace/note.txt && echo home > /root/h.txt && pwd');
    expect(r, at(sandbox)).toMatchObject({ code: 0, out: '/workspace\n' });
    expect(await readFile(path.join(hostDir, 'workspace', 'note.txt'), 'utf8')).toBe('from-container\n');
    expect(await readFile(path.join(hostDir, 'home', 'h.txt'), 'utf8')).toBe('home\n');

    await backend.remove(sandbox.ref, sandbox.hostDir);
    expect(existsSync(hostDir)).toBe(false);
    await expect(docker.getContainer(sandbox.ref).inspect()).rejects.toMatchObject({ statusCode: 404 });
    await backend.remove(sandbox.ref, sandbox.hostDir); // already gone: success
    await expect(backend.remove('no-such-container-berth', '/etc')).rejects.toBeInstanceOf(PolicyRefusedError);
  });

  it('spec.mount is bound at /workspace, and adopting with a different mount is refused', async () => {
    const project = await mkdtemp(path.join(os.tmpdir(), 'berth-mount-'));
    const other = await mkdtemp(path.join(os.tmpdir(), 'berth-mount-other-'));
    // Project dirs of an unprivileged user: a root-owned one is never bound read-write.
    for (const d of [project, other]) await chown(d, 1000, 1000);
    try {
      await writeFile(path.join(project, 'README'), 'project file\n');
      const spec = testSpec(installation, { key: 'default', mount: project });
      const sandbox = await backend.ensure(spec, undefined);
      expect((await sh(sandbox, 'cat /workspace/README')).out, at(sandbox)).toBe('project file\n');
      // Same mount: adopted. No mount asked: adopted as it is.
      expect((await backend.ensure(spec, sandbox.ref)).ref).toBe(sandbox.ref);
      expect((await backend.ensure({ ...spec, mount: null }, sandbox.ref)).ref).toBe(sandbox.ref);
      const err = await backend.ensure({ ...spec, mount: other }, sandbox.ref).catch((e: unknown) => e);
      expect(err, at(sandbox)).toBeInstanceOf(PolicyRefusedError);
      expect((err as Error).message).toContain(`already has mount "${project}" at /workspace`);
      expect((err as Error).message).toMatch(/close or remove that sandbox, or use the same workspace/);
    } finally {
      await rm(project, { recursive: true, force: true });
      await rm(other, { recursive: true, force: true });
    }
  });

  it('a docker.volumes entry targeting /workspace wins over the automatic mount', async () => {
    const vol = await mkdtemp(path.join(os.tmpdir(), 'berth-vol-'));
    await chown(vol, 1000, 1000);
    try {
      await writeFile(path.join(vol, 'v'), 'volume\n');
      const spec = testSpec(installation, { docker: { volumes: [volumeSettings(`${vol}:/workspace`), volumeSettings(`${vol}:/data:ro`)] } });
      const sandbox = await backend.ensure(spec, undefined);
      expect((await sh(sandbox, 'cat /workspace/v /data/v; touch /data/x')).out, at(sandbox)).toBe('volume\nvolume\n');
      expect(existsSync(path.join(vol, 'x'))).toBe(false);
    } finally {
      await rm(vol, { recursive: true, force: true });
    }
  });

  it('hardening is visible from inside: caps, no-new-privileges, init as PID 1, limits', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    const status = (await sh(sandbox, 'cat /proc/self/status')).out;
    const capEff = /CapEff:\s*([0-9a-f]+)/.exec(status)?.[1];
    expect(capEff && BigInt(`0x${capEff}`), at(sandbox)).toBe(CAP_ADD_MASK);
    expect(status, at(sandbox)).toMatch(/NoNewPrivs:\s*1/);
    // PID 1 is the init; its child, the main process, is berth's warden reading from stdin.
    expect((await sh(sandbox, 'tr "\\0" " " < /proc/1/cmdline')).out, at(sandbox)).toMatch(/^\/sbin\/docker-init -- bash --noprofile --norc -c /);
    expect((await sh(sandbox, 'grep " /tmp " /proc/mounts')).out, at(sandbox)).toMatch(/tmpfs \/tmp tmpfs rw,nosuid,nodev.*size=262144k/);
    expect((await sh(sandbox, 'stat -c %a /tmp')).out, at(sandbox)).toBe('1777\n');
    const host = (await docker.getContainer(sandbox.ref).inspect()).HostConfig;
    expect(host, at(sandbox)).toMatchObject({
      Memory: 2048 * 1024 * 1024,
      NanoCpus: 2e9,
      PidsLimit: 512,
      ShmSize: 64 * 1024 * 1024,
      Init: true,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges:true'],
    });
  });

  it('runAsHostUser runs as the host uid:gid, owning the ephemeral tmpfs', async () => {
    const asUser = new DockerBackend({ docker, installation, berthHome, hostUser: { uid: 1234, gid: 2345 } });
    const sandbox = await asUser.ensure(testSpec(installation, { ephemeral: true, docker: { runAsHostUser: true } }), undefined);
    const r = await sh(sandbox, 'id -u; id -g; touch /workspace/a /root/b /tmp/c && echo writable; grep CapEff /proc/self/status');
    expect(r.out, `${at(sandbox)}: ${r.err}`).toMatch(/^1234\n2345\nwritable\nCapEff:\s*0+\n$/);
  });

  it('a fork bomb is stopped by pidsLimit (under a hard timeout)', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true, docker: { pidsLimit: 64 } }), undefined);
    const hardTimeout = new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`fork bomb not contained within 30 s in ${at(sandbox)}`)), 30_000).unref(),
    );
    try {
      await Promise.race([
        (async () => {
          // The launcher forks once, before any bomb process exists, and ends: had it run the
          // bomb's first pipeline itself, its second fork could meet the limit and bash would retry
          // it for 15 s.
          await sandbox.execOnce(['bash', '-c', 'exec >/dev/null 2>&1; :(){ :|:& }; : & exit 0'], { timeoutMs: 10_000 });
          // A bomb starved of CPU on a busy machine takes a while to grow: look until it has.
          let pids = -1;
          for (const deadline = Date.now() + 20_000; pids <= 32 && Date.now() < deadline;) {
            await new Promise((resolve) => setTimeout(resolve, 200));
            const stats = (await docker.getContainer(sandbox.ref).stats({ stream: false })) as { pids_stats?: { current?: number } };
            pids = stats.pids_stats?.current ?? -1;
          }
          expect(pids, at(sandbox)).toBeGreaterThan(32); // the bomb really ran …
          expect(pids, at(sandbox)).toBeLessThanOrEqual(64); // … and hit the limit
        })(),
        hardTimeout,
      ]);
    } finally {
      await backend.remove(sandbox.ref, undefined);
    }
  });

  it('network: none has no route and no interface but lo', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true, docker: { network: 'none' } }), undefined);
    const route = (await sh(sandbox, 'cat /proc/net/route')).out.trim().split('\n');
    expect(route, at(sandbox)).toHaveLength(1);
    const ifaces = (await sh(sandbox, 'tail -n +3 /proc/net/dev | cut -d: -f1')).out.split('\n').map((s) => s.trim()).filter(Boolean);
    expect(ifaces, at(sandbox)).toEqual(['lo']);
  });

  it('an explicit limit the engine cannot apply fails check(); a default one only warns, at warn level', async () => {
    const real = (await docker.info()) as Record<string, unknown>;
    const limited = Object.create(docker) as Dockerode;
    limited.info = (async () => ({ ...real, PidsLimit: false })) as Dockerode['info'];
    const warnings: string[] = [];
    const b = new DockerBackend({ docker: limited, installation, berthHome, log: new Logger((_ns, m, r) => void warnings.push(`${r?.level ?? 'debug'} ${m}`)) });
    const err = await b.check(dockerSettings({ pidsLimit: 64 })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/docker\.pidsLimit is set to 64/);
    await b.check(dockerSettings());
    // A warn line, which the default level shows (a debug line would reach only BERTH_DEBUG).
    expect(warnings.join('\n')).toMatch(/^warn this engine cannot limit the number of processes/m);
  });

  it('openShell demultiplexes stdout and stderr and reports the exit code', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    const shell = await sandbox.openShell({ env: {}, cwd: '/workspace' });
    const out = readAll(shell.stdout);
    const err = readAll(shell.stderr);
    shell.stdin.write('echo hi; echo err >&2; exit 0\n');
    expect(await out, at(sandbox)).toBe('hi\n');
    expect(await err, at(sandbox)).toBe('err\n');
    expect(await shell.exited).toBe(0);

    const failing = await sandbox.openShell({ env: {}, cwd: '/tmp' });
    failing.stdin.write('pwd; exit 3\n');
    expect(await readAll(failing.stdout)).toBe('/tmp\n');
    expect(await failing.exited).toBe(3);

    // EOF on stdin ends the shell too.
    const eof = await sandbox.openShell({ env: {}, cwd: '/workspace' });
    eof.stdin.end('echo bye\n');
    expect(await readAll(eof.stdout)).toBe('bye\n');
    expect(await eof.exited).toBe(0);
  });

  it('a process\'s stdio are FIFOs in its own container\'s stdio dir, read-only inside; a container without one (an older berth\'s) runs through the attach', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    const info = await docker.getContainer(sandbox.ref).inspect();
    const id = info.Config.Labels['berth.stdio'];
    expect(id, at(sandbox)).toMatch(/^[0-9a-f]{16}$/);
    const hostDir = path.join(berthHome, 'sandboxes', 'docker', '.stdio', id!);
    expect(info.Mounts.find((m) => m.Destination === '/run/berth-stdio'), at(sandbox)).toMatchObject({ Type: 'bind', Source: hostDir, RW: false });

    // The shell's own stdio, seen from inside: FIFOs in the dir, not the engine's pipes.
    const shell = await sandbox.openShell({ env: {}, cwd: '/workspace' });
    const out = readAll(shell.stdout);
    shell.stdin.end('for f in 0 1 2; do readlink /proc/$$/fd/$f; done; touch /run/berth-stdio/planted 2>/dev/null && echo wrote; ls -l /run/berth-stdio | grep -c "^p---------"\n');
    const lines = (await out).trim().split('\n');
    // (Unlinked once the shell held them: no later process can open them by name.)
    for (const [fd, line] of lines.slice(0, 3).entries()) expect(line, `fd ${fd} ${at(sandbox)}`).toMatch(new RegExp(`^/run/berth-stdio/[0-9a-f]{16}\\.${fd} \\(deleted\\)$`));
    // Nothing inside can add to it; the sets made ahead wait unopenable (mode 0000) until taken.
    expect(lines[3], at(sandbox)).not.toBe('wrote');
    expect(Number(lines.at(-1)), at(sandbox)).toBeGreaterThan(0);
    expect(await shell.exited).toBe(0);
    // Only sets not taken yet are left in the host dir (a used one is unlinked once its process holds it).
    const files = (await readdir(hostDir)).filter((n) => n.endsWith('.1'));
    for (const f of files) expect((await stat(path.join(hostDir, f))).mode & 0o777, f).toBe(0);

    // An older berth's container: no stdio dir. Adopted by its ref, its shell goes through the attach.
    const spec = testSpec(installation, { ephemeral: true });
    const { Labels, HostConfig, ...rest } = (await docker.getContainer(sandbox.ref).inspect()).Config as unknown as Dockerode.ContainerCreateOptions & { Labels: Record<string, string> };
    void HostConfig;
    const { ['berth.stdio']: _gone, ...older } = Labels;
    const made = await docker.createContainer({
      ...rest, name: `berth-older-${spec.digest.slice(0, 12)}`, Hostname: undefined,
      Labels: { ...older, 'berth.identity': spec.digest, 'berth.key': spec.identity.key },
      HostConfig: { NetworkMode: info.HostConfig.NetworkMode, Init: true, Tmpfs: info.HostConfig.Tmpfs ?? {} },
    } as Dockerode.ContainerCreateOptions);
    await made.start();
    const adopted = await backend.ensure(spec, made.id);
    expect(adopted.ref).toBe(made.id);
    const r = await adopted.execOnce(['sh', '-c', 'readlink /proc/$$/fd/1; echo done']);
    expect(r.stdout.toString(), at(adopted)).toMatch(/^pipe:\[\d+\]\ndone\n$/);
    const old = await adopted.openShell({ env: {}, cwd: '/workspace' });
    const oldOut = readAll(old.stdout);
    old.stdin.end('echo via-attach\n');
    expect(await oldOut).toBe('via-attach\n');
    expect(await old.exited).toBe(0);
    await backend.remove(made.id, undefined);
    await backend.remove(sandbox.ref, undefined);
    expect(existsSync(hostDir), 'its stdio dir goes with the container').toBe(false);
  });

  it('a berth process that closes leaves no FIFO set of its own in a sandbox\'s stdio dir, and the dirs above the stdio dirs are private (0700)', async () => {
    const home = await mkdtemp(path.join(os.tmpdir(), 'berth-docker-fifos-'));
    const first = new DockerBackend({ docker, installation, berthHome: home });
    try {
      const spec = testSpec(installation, { ephemeral: true });
      const sandbox = await first.ensure(spec, undefined);
      for (const d of ['sandboxes', 'sandboxes/docker']) expect((await stat(path.join(home, d))).mode & 0o777, d).toBe(0o700);
      const id = (await docker.getContainer(sandbox.ref).inspect()).Config.Labels['berth.stdio']!;
      const dir = path.join(home, 'sandboxes', 'docker', '.stdio', id);
      expect((await sandbox.execOnce(['true'])).exitCode).toBe(0);
      expect((await readdir(dir)).length, 'a batch made ahead').toBeGreaterThan(0);
      // Each CLI call is a process of its own: what it made ahead and did not use goes with it.
      await first.close();
      expect(await readdir(dir)).toEqual([]);
      const second = new DockerBackend({ docker, installation, berthHome: home });
      try {
        const again = await second.ensure(spec, sandbox.ref);
        expect((await again.execOnce(['sh', '-c', 'echo again'])).stdout.toString()).toBe('again\n');
        await second.remove(again.ref, undefined);
      } finally {
        await second.close();
      }
    } finally {
      await removeInstallationContainers(docker, installation).catch(() => undefined);
      await rm(home, { recursive: true, force: true });
    }
  });

  it('the stdio wrapper runs nothing before the program: no BASH_ENV file, while the program still gets the variable', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    const plant = await sandbox.execOnce(['/bin/sh', '-c', 'echo "touch /tmp/sourced" > /tmp/benv.sh']);
    expect(plant.exitCode, at(sandbox)).toBe(0);
    const p = await sandbox.spawn(['/bin/sh', '-c', 'echo "$BASH_ENV"; ls /tmp'], { env: { BASH_ENV: '/tmp/benv.sh' }, stdin: false });
    const out = readAll(p.stdout);
    p.stderr.resume();
    expect(await p.exited).toBe(0);
    const [seen, ...files] = (await out).trim().split('\n');
    expect(seen, at(sandbox)).toBe('/tmp/benv.sh');
    expect(files, at(sandbox)).not.toContain('sourced');
  });

  it('a process whose output a process it left holds open still ends, with its code and output, once it ended; so does a file put or read by a tar that leaves one behind', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    try {
      // One stream held (the other closed), then both: the process's end decides, as with an exec's attach.
      expect(await sh(sandbox, '(exec 2>&-; sleep 120) & echo one; exit 3', 60_000)).toEqual({ code: 3, out: 'one\n', err: '' });
      expect(await sh(sandbox, '(sleep 120) & echo both', 60_000)).toEqual({ code: 0, out: 'both\n', err: '' });
      // A tar (container root may replace it) that leaves a process holding its output.
      // (Looked up by bash, as berth's spawn does: busybox's sh names its own applet.)
      const wrap = await sh(sandbox, 'orig=$(bash -c "command -v tar") && mkdir -p /usr/local/bin && printf \'#!/bin/sh\\n%s "$@"; rc=$?; (sleep 120) & exit $rc\\n\' "$orig" > /usr/local/bin/tar && chmod +x /usr/local/bin/tar && bash -c "command -v tar"');
      expect(wrap.out, wrap.err).toBe('/usr/local/bin/tar\n');
      const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-held-'));
      await writeFile(path.join(dir, 'f.txt'), 'payload\n');
      const archive = await new Promise<Buffer>((resolve, reject) => {
        const t = spawn('tar', ['-c', '-f', '-', '-C', dir, 'f.txt'], { stdio: ['ignore', 'pipe', 'inherit'] });
        const out: Buffer[] = [];
        t.stdout.on('data', (b: Buffer) => out.push(b));
        t.once('close', (code) => (code === 0 ? resolve(Buffer.concat(out)) : reject(new Error(`tar ${code}`))));
      });
      await rm(dir, { recursive: true, force: true });
      await sandbox.putArchive('/tmp', archive);
      expect((await sh(sandbox, 'cat /tmp/f.txt')).out, at(sandbox)).toBe('payload\n');
      expect(await readAll(await sandbox.getArchive('/tmp/f.txt'), 30_000), at(sandbox)).toContain('payload');
      // A reader that holds the output back until long after tar ended still gets every byte: 90 KiB
      // is past what berth reads before it holds back (one 64 KiB read) and within what the FIFO
      // then takes, so tar ends with its last bytes waiting in the FIFO. (Cut 2 s after tar's end,
      // the archive came truncated: this failed so.)
      const sum = (await sh(sandbox, 'head -c 92160 /dev/urandom > /tmp/big && sha256sum /tmp/big')).out.split(' ')[0];
      const slow = await sandbox.getArchive('/tmp/big');
      await new Promise((resolve) => setTimeout(resolve, 4_000));
      const got: Buffer[] = [];
      for await (const chunk of slow) got.push(chunk as Buffer);
      const unpacked = await new Promise<Buffer>((resolve, reject) => {
        const t = spawn('tar', ['-x', '-O', '-f', '-'], { stdio: ['pipe', 'pipe', 'inherit'] });
        const out: Buffer[] = [];
        t.stdout.on('data', (b: Buffer) => out.push(b));
        t.once('close', (code) => (code === 0 ? resolve(Buffer.concat(out)) : reject(new Error(`tar ${code}`))));
        t.stdin.end(Buffer.concat(got));
      });
      expect(createHash('sha256').update(unpacked).digest('hex'), at(sandbox)).toBe(sum);
    } finally {
      await backend.remove(sandbox.ref, undefined);
    }
  }, 120_000);

  it('env values reach the shell but never the container config or any exec argv', async () => {
    const secret = `s3cr3t-${Math.random().toString(16).slice(2)}`;
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    const shell = await sandbox.openShell({ env: { SECRET_X: secret, PLAIN: 'p' }, cwd: '/workspace' });
    try {
      expect(await ask(shell, 'echo "$SECRET_X $PLAIN $HOME"'), at(sandbox)).toBe(`${secret} p /root\n`);
      const info = await docker.getContainer(sandbox.ref).inspect();
      expect(JSON.stringify(info), at(sandbox)).not.toContain(secret);
      const execIds = (info as unknown as { ExecIDs: string[] | null }).ExecIDs ?? [];
      expect(execIds.length).toBeGreaterThan(0);
      for (const id of execIds) {
        const exec = await docker.getExec(id).inspect();
        expect(JSON.stringify(exec.ProcessConfig), `exec ${id} in ${at(sandbox)}`).not.toContain(secret);
      }
      // Nor on any argv inside the sandbox.
      const cmdlines = (await sh(sandbox, 'cat /proc/[0-9]*/cmdline | tr "\\0" " "')).out;
      expect(cmdlines).not.toContain(secret);
    } finally {
      await shell.kill();
    }
  });

  it('kill() ends the shell and its children, is idempotent and never throws', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    const shell = await sandbox.openShell({ env: {}, cwd: '/workspace' });
    await ask(shell, 'sleep 1234 & sleep 1235 >/dev/null 2>&1 &');
    expect((await sh(sandbox, 'ps -o args')).out, at(sandbox)).toContain('sleep 1234');
    await Promise.all([shell.kill(), shell.kill()]);
    await shell.kill();
    expect(await shell.exited).not.toBe(0);
    // Every process but the init (pid 1) and the main one (the warden, the init's child).
    const ps = (await sh(sandbox, "ps -o pid,ppid,args | awk '$1 != 1 && $2 != 1'")).out;
    expect(ps, at(sandbox)).not.toContain('sleep 123');
    expect(ps, at(sandbox)).not.toContain('bash --noprofile');
    // Writing after kill does not throw out of the transport.
    shell.stdin.write('echo late\n');
  });

  it('execOnce returns exit codes and separated output, bounded by timeoutMs', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    expect(await sh(sandbox, 'echo out; echo err >&2; exit 7')).toEqual({ code: 7, out: 'out\n', err: 'err\n' });
    expect((await sandbox.execOnce(['true'])).exitCode).toBe(0);
    const started = Date.now();
    await expect(sandbox.execOnce(['sleep', '30'], { timeoutMs: 500 })).rejects.toThrow(/did not finish within 500 ms/);
    expect(Date.now() - started).toBeLessThan(5_000);
    // The timed-out helper does not linger in the sandbox: it is gone well before its 30 s end
    // (looked for until then, as its kill may take a moment on a busy machine).
    let ps = '';
    for (const deadline = Date.now() + 10_000; ; await new Promise((resolve) => setTimeout(resolve, 200))) {
      ps = (await sh(sandbox, 'ps -o args')).out;
      if (!ps.includes('sleep 30') || Date.now() > deadline) break;
    }
    expect(ps, at(sandbox)).not.toContain('sleep 30');
  });

  it('execOnce stops a helper whose sh floods output: bounded memory, helper_output_too_large, helper killed', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    // The agent is root in its container and shadows sh earlier on PATH (berth's helpers run `sh -c`).
    const plant = await sandbox.execOnce([
      '/bin/sh', '-c',
      'mkdir -p /usr/local/bin && printf "#!/bin/sh\\nhead -c 200000000 /dev/zero\\nexec sleep 1234\\n" > /usr/local/bin/sh && chmod +x /usr/local/bin/sh',
    ]);
    expect(plant.exitCode, `${at(sandbox)}: ${plant.stderr.toString()}`).toBe(0);

    global.gc?.();
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => { peak = Math.max(peak, process.memoryUsage().rss); }, 5);
    const started = Date.now();
    const err = await sandbox.execOnce(['sh', '-c', 'true'], { timeoutMs: 60_000 }).catch((e: unknown) => e);
    clearInterval(sampler);
    peak = Math.max(peak, process.memoryUsage().rss);
    expect(err, at(sandbox)).toBeInstanceOf(BerthError);
    expect((err as BerthError).code).toBe('helper_output_too_large');
    expect((err as BerthError).message).toContain(String(DEFAULT_HELPER_OUTPUT_BYTES));
    expect(peak - before, `RSS grew by ${Math.round((peak - before) / 1e6)} MB`).toBeLessThan(300 * 1024 * 1024);
    expect(Date.now() - started).toBeLessThan(20_000);

    // The flooding helper is ended (killed by its tag), not left running after its stream closed.
    const deadline = Date.now() + 10_000;
    let ps = '';
    do {
      await new Promise((resolve) => setTimeout(resolve, 200));
      ps = (await sandbox.execOnce(['ps', '-o', 'args'])).stdout.toString('utf8');
    } while (/\/usr\/local\/bin\/sh|head -c 200000000|sleep 1234/.test(ps) && Date.now() < deadline);
    expect(ps, at(sandbox)).not.toMatch(/\/usr\/local\/bin\/sh|head -c 200000000|sleep 1234/);

    // A caller's own bound applies to stdout + stderr together.
    await expect(sandbox.execOnce(['/bin/sh', '-c', 'head -c 600 /dev/zero; head -c 600 /dev/zero >&2'], { maxOutputBytes: 1000 }))
      .rejects.toMatchObject({ code: 'helper_output_too_large' });
    const ok = await sandbox.execOnce(['/bin/sh', '-c', 'head -c 500 /dev/zero; head -c 500 /dev/zero >&2'], { maxOutputBytes: 1000 });
    expect([ok.exitCode, ok.stdout.length, ok.stderr.length]).toEqual([0, 500, 500]);
  });

  it('a failed start removes what it created and reports the original error', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-badmount-'));
    try {
      await mkdir(path.join(dir, 'not-a-file'));
      // A directory bound over a file: create succeeds, start fails.
      const spec = testSpec(installation, { ephemeral: true, docker: { volumes: [volumeSettings(`${path.join(dir, 'not-a-file')}:/etc/passwd:ro`)] } });
      const err = await backend.ensure(spec, undefined).catch((e: unknown) => e);
      expect((err as Error).message).toMatch(/start container/);
      const left = (await backend.listManaged()).filter((m) => m.digest === spec.digest);
      expect(left.map((m) => m.ref)).toEqual([]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('listManaged returns only this installation’s containers', async () => {
    const foreign = new DockerBackend({ docker, installation: otherInstallation, berthHome });
    const theirs = await foreign.ensure(testSpec(otherInstallation, { ephemeral: true }), undefined);
    const mine = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    const listed = (await backend.listManaged()).map((m) => m.ref);
    expect(listed).toContain(mine.ref);
    expect(listed, at(theirs)).not.toContain(theirs.ref);
    expect((await foreign.listManaged()).map((m) => m.ref)).toEqual([theirs.ref]);
    // Another installation's persistent container of the same name is never adopted.
    const spec = testSpec(otherInstallation, { key: 'default' });
    const owned = await foreign.ensure(spec, undefined);
    const err = await backend.ensure({ ...spec, identity: { ...spec.identity, installation } }, undefined).catch((e: unknown) => e);
    expect(err, at(owned)).toBeInstanceOf(PolicyRefusedError);
    expect((err as Error).message).toMatch(/berth never adopts it/);
  });

  it('a missing image is SandboxNotFoundError naming "berth image build"', async () => {
    const settings = dockerSettings({ image: 'berth-no-such-image:nope' });
    const err = await backend.check(settings).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxNotFoundError);
    expect((err as Error).message).toBe('docker image "berth-no-such-image:nope" not found; run "berth image build" (or set docker.image)');
    const spec = testSpec(installation, { ephemeral: true, docker: { image: 'berth-no-such-image:nope' } });
    await expect(backend.ensure(spec, undefined)).rejects.toThrow(/run "berth image build"/);
  });

  it('buildImage reuses an existing image unless forced', async () => {
    const lines: string[] = [];
    expect(await buildImage({ docker, image: 'berth-sandbox:minimal', variant: 'minimal', force: false, onProgress: (l) => lines.push(l) })).toEqual({
      built: false,
    });
    expect(lines.join('\n')).toMatch(/reusing it/);
  });
});

const registryBinary = ['/usr/bin/docker-registry', '/usr/local/bin/docker-registry'].find((p) => existsSync(p));
if (status.ok && !registryBinary && dockerRequired()) {
  throw new Error('BERTH_REQUIRE_DOCKER=1 but the Debian package docker-registry is not installed (apt-get install docker-registry; .ci/run does)');
}
const describeRegistry = status.ok && registryBinary ? describe : describe.skip;
const registrySkip = !status.ok ? skipReason : registryBinary ? '' : ' (skipped: Debian package docker-registry is not installed)';

describeRegistry(`docker images from a registry on loopback${registrySkip}`, () => {
  let registry: ChildProcess | undefined;
  let dir: string;
  const port = 15_000 + Math.floor(Math.random() * 1_000);
  const remote = `127.0.0.1:${port}/berth-test/sandbox:pull`;

  beforeAll(async () => {
    await ensureTestImage(docker);
    dir = await mkdtemp(path.join(os.tmpdir(), 'berth-registry-'));
    const config = path.join(dir, 'config.yml');
    await writeFile(
      config,
      `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${dir}/data\nhttp:\n  addr: 127.0.0.1:${port}\n`,
    );
    registry = spawn(registryBinary!, ['serve', config], { stdio: 'ignore' });
    for (let i = 0; i < 100; i += 1) {
      const up = await fetch(`http://127.0.0.1:${port}/v2/`).then((r) => r.ok, () => false);
      if (up) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await docker.getImage(TEST_IMAGE).tag({ repo: `127.0.0.1:${port}/berth-test/sandbox`, tag: 'pull' });
    const push = await docker.getImage(remote).push({ authconfig: {} } as Dockerode.ImagePushOptions);
    await new Promise((resolve, reject) => docker.modem.followProgress(push, (err: Error | null) => (err ? reject(err) : resolve(undefined))));
    await docker.getImage(remote).remove();
  });

  afterAll(async () => {
    await docker.getImage(remote).remove().catch(() => undefined);
    if (registry?.pid !== undefined) registry.kill('SIGTERM');
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('a registry image is pulled with progress, then reused', async () => {
    expect(registryHost(remote)).toBe(`127.0.0.1:${port}`);
    expect(registryHost('berth-sandbox:latest')).toBeUndefined();
    expect(registryHost('library/debian:12')).toBeUndefined();
    const lines: string[] = [];
    const first = await provideImage({ docker, image: remote, variant: 'minimal', force: false, onProgress: (l) => lines.push(l) });
    expect(first).toEqual({ action: 'pulled' });
    expect(lines.join('\n')).toMatch(/Pull complete|Downloaded newer image/);
    expect((await provideImage({ docker, image: remote, variant: 'minimal', force: false, onProgress: () => undefined })).action).toBe(
      'reused',
    );
    const missing = `127.0.0.1:${port}/berth-test/nope:1`;
    await expect(provideImage({ docker, image: missing, variant: 'minimal', force: false, onProgress: () => undefined })).rejects.toThrow(
      /not found|could not pull/,
    );
  });
});
