import { randomBytes } from 'node:crypto';
import { existsSync, lstatSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { DockerBackend } from '../../src/backends/docker/docker-backend.js';
import { defaultDocker } from '../../src/backends/docker/engine.js';
import { hostViewOf, viewedDir } from '../../src/backends/docker/host-view.js';
import { ownerToken } from '../../src/kit/process-owner.js';
import { Logger } from '../../src/logging/logger.js';
import { BerthError } from '../../src/errors.js';
import { UNBOUNDED } from '../conformance/snapshot-conformance.js';
import { testSpec } from '../helpers/docker.js';
import { describeDocker, docker, dockerSuiteHooks, imagesOf, installs } from '../helpers/docker-e2e.js';

/*
 * What only docker's snapshots do: the image commit (the container's config and its writable
 * layer) and the attached workspace left out. The capability's common promises are the
 * conformance suite's (backend-conformance-docker.test.ts).
 */

const reg = installs('berth-snap-docker-');

describeDocker('docker snapshots', () => {
  dockerSuiteHooks(reg);
  const backends: DockerBackend[] = [];
  afterEach(async () => {
    for (const b of backends.splice(0)) await b.close();
  });

  const setup = () => {
    const install = reg.track();
    // The default client names the socket, as berth's own does: the engine is this host's.
    const backend = new DockerBackend({ docker: defaultDocker(), installation: install.installation, berthHome: install.home });
    backends.push(backend);
    return { install, backend };
  };
  const sh = async (s: { execOnce(a: string[]): Promise<{ exitCode: number | null; stdout: Buffer; stderr: Buffer }> }, script: string): Promise<string> => {
    const r = await s.execOnce(['sh', '-c', script]);
    expect(r.exitCode, r.stderr.toString()).toBe(0);
    return r.stdout.toString();
  };

  it('a granted value given to a shell reaches neither the container\'s config nor the committed image\'s', async () => {
    const { install, backend } = setup();
    const s = await backend.ensure(testSpec(install.installation, { ephemeral: true }), undefined);
    const value = `granted-${randomBytes(12).toString('hex')}`;
    const shell = await s.openShell({ env: { GRANTED_TOKEN: value }, cwd: s.defaultCwd });
    try {
      const snap = await backend.snapshots.create(s, 'env-check', [{ name: 'GRANTED_TOKEN', value }], UNBOUNDED);
      const image = await docker.getImage(snap.ref.slice(snap.ref.indexOf('@') + 1)).inspect();
      const container = await docker.getContainer(s.ref).inspect();
      expect(JSON.stringify(container.Config)).not.toContain(value);
      expect(JSON.stringify(image.Config)).not.toContain(value);
      expect(image.Config.Env).toEqual(container.Config.Env);
      // Labelled and tagged as berth's, never as a user image.
      expect(image.Config.Labels).toMatchObject({ 'berth.managed': 'true', 'berth.installation': install.installation, 'berth.snapshot': 'env-check' });
      expect(image.RepoTags).toEqual([`berth-snapshot:${install.installation.slice(0, 12)}-env-check`]);
      await backend.snapshots.remove(snap.ref);
    } finally {
      await shell.kill();
    }
  }, 120_000);

  it('a value the sandbox wrote outside its own dirs (the writable layer) refuses the snapshot, naming the path, and leaves no image', async () => {
    const { install, backend } = setup();
    const s = await backend.ensure(testSpec(install.installation, { ephemeral: true }), undefined);
    const value = `layer-${randomBytes(12).toString('hex')}`;
    await sh(s, `mkdir -p /etc/app && printf 'token=%s\\n' ${value} > /etc/app/conf`);
    const err = await backend.snapshots.create(s, 'layer', [{ name: 'APP_TOKEN', value }], UNBOUNDED).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as Error).message).toContain('/etc/app/conf');
    expect((err as Error).message).toContain('APP_TOKEN');
    expect((err as Error).message).not.toContain(value);
    expect(await imagesOf(install.installation)).toEqual([]);
    expect(existsSync(join(install.home, 'snapshots', 'docker', 'layer'))).toBe(false);
    // The container was paused for the scan and runs again.
    expect((await docker.getContainer(s.ref).inspect()).State.Paused).toBe(false);
    expect(await sh(s, 'echo alive')).toBe('alive\n');
  }, 120_000);

  it('a sparse file in the writable layer past the budget refuses the snapshot before any commit, naming its size', async () => {
    const { install, backend } = setup();
    const s = await backend.ensure(testSpec(install.installation, { ephemeral: true }), undefined);
    // 64 MiB that take no disk; a commit would write them out in full.
    await sh(s, 'mkdir -p /opt && truncate -s 67108864 /opt/sparse');
    const sinceS = Math.floor(Date.now() / 1000) - 1;
    const err = await backend.snapshots.create(s, 'sparse', [], { maxBytes: 1 << 20, limit: 'the test\'s 1 MiB' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as BerthError).code).toBe('tenant_limit');
    const held = /refused before copying: its writable layer \(files outside its own dirs\) holds (\d+) bytes .*the test's 1 MiB/.exec((err as Error).message);
    expect(Number(held?.[1])).toBeGreaterThanOrEqual(67108864);
    // The engine never committed the container.
    const events = await docker.getEvents({ since: sinceS, until: Math.floor(Date.now() / 1000) + 1, filters: JSON.stringify({ container: [s.ref], event: ['commit'] }) });
    let seen = '';
    for await (const chunk of events as AsyncIterable<Buffer>) seen += chunk.toString();
    expect(seen).toBe('');
    expect(await imagesOf(install.installation)).toEqual([]);
    expect((await docker.getContainer(s.ref).inspect()).State.Paused).toBe(false);
  }, 120_000);

  it('an attached workspace is not part of the snapshot, and the snapshot says so', async () => {
    const { install, backend } = setup();
    const ws = install.userDir('project');
    writeFileSync(join(ws, 'user-file.txt'), 'the user\'s\n');
    const s = await backend.ensure(testSpec(install.installation, { ephemeral: true, mount: ws }), undefined);
    await sh(s, 'echo in-home > ~/h.txt');
    const snap = await backend.snapshots.create(s, 'attached', [], UNBOUNDED);
    const dir = join(install.home, 'snapshots', 'docker', 'attached');
    expect(readdirSync(dir).sort()).toEqual(['home', 'meta.json']);
    expect(readFileSync(join(dir, 'meta.json'), 'utf8')).toContain(`/workspace: the attached workspace ${ws} is the user's, not part of the snapshot`);
    const fork = await backend.snapshots.createFrom(testSpec(install.installation, { ephemeral: true }), snap.ref, undefined);
    expect(await sh(fork, 'cat ~/h.txt; ls /workspace')).toBe('in-home\n');
    for (const x of [s, fork]) await backend.remove(x.ref, x.hostDir);
    await backend.snapshots.remove(snap.ref);
  }, 120_000);

  it('a removed snapshot whose image a fork still uses moves to a "gone" tag, stays while the fork lives (running or stopped), and the orphan pass removes it once the fork is gone', async () => {
    const { install, backend } = setup();
    const s = await backend.ensure(testSpec(install.installation, { ephemeral: true }), undefined);
    const snap = await backend.snapshots.create(s, 'base-of-fork', [], UNBOUNDED);
    const imageId = snap.ref.slice(snap.ref.indexOf('@') + 1);
    const fork = await backend.snapshots.createFrom(testSpec(install.installation, { ephemeral: true }), snap.ref, undefined);
    await backend.snapshots.remove(snap.ref);
    const prefix = install.installation.slice(0, 12);
    expect((await docker.getImage(imageId).inspect()).RepoTags).toEqual([`berth-snapshot:${prefix}-gone-base-of-fork`]);
    // No record names it: the orphan pass sees it, and while the fork lives its removal leaves it.
    expect(await backend.snapshots.list()).toContain(snap.ref);
    await backend.snapshots.remove(snap.ref);
    expect((await docker.getImage(imageId).inspect()).Id).toBe(imageId);
    // A stopped fork (hibernated) holds it too, and still starts from it.
    await docker.getContainer(fork.ref).stop({ t: 0 });
    await backend.snapshots.remove(snap.ref);
    expect((await docker.getImage(imageId).inspect()).Id).toBe(imageId);
    await docker.getContainer(fork.ref).start();
    for (const x of [s, fork]) await backend.remove(x.ref, x.hostDir);
    // Once unused, the same pass removes it.
    await backend.snapshots.remove(snap.ref);
    await expect(docker.getImage(imageId).inspect()).rejects.toMatchObject({ statusCode: 404 });
    expect(await backend.snapshots.list()).not.toContain(snap.ref);
  }, 120_000);

  it('an image built from a snapshot carries its labels but not its tag, and the orphan pass never lists it', async () => {
    const { install, backend } = setup();
    const s = await backend.ensure(testSpec(install.installation, { ephemeral: true }), undefined);
    const snap = await backend.snapshots.create(s, 'parent', [], UNBOUNDED);
    const imageId = snap.ref.slice(snap.ref.indexOf('@') + 1);
    // A user's `docker commit` of a container made from the snapshot: the labels are inherited.
    const c = await docker.createContainer({ Image: imageId, Cmd: ['true'] });
    const derived = await c.commit({ repo: 'users-own-image', tag: install.installation.slice(0, 12) });
    try {
      expect((await docker.getImage(derived.Id).inspect()).Config.Labels).toMatchObject({ 'berth.snapshot': 'parent' });
      expect((await backend.snapshots.list()).filter((r) => !r.endsWith(`@${imageId}`))).toEqual([]);
    } finally {
      await c.remove({ force: true });
      await docker.getImage(derived.Id).remove({ force: true });
      await backend.remove(s.ref, s.hostDir);
      await backend.snapshots.remove(snap.ref);
    }
  }, 120_000);

  it('an ephemeral sandbox\'s tmpfs dirs are copied on the host with it frozen: links stay links (never followed to the host\'s files), FIFOs stay FIFOs, and a fork gets them whole', async () => {
    const install = reg.track();
    const lines: string[] = [];
    const backend = new DockerBackend({
      docker: defaultDocker(), installation: install.installation, berthHome: install.home, log: new Logger((_ns, message) => void lines.push(message), 'berth:docker'),
    });
    backends.push(backend);
    const s = await backend.ensure(testSpec(install.installation, { ephemeral: true }), undefined);
    await sh(s, 'ln -s /etc/hostname /root/hostlink && ln -s /etc /workspace/etc && mkdir -p /workspace/d && echo kept > /workspace/d/f && mkfifo /root/pipe && chmod 0751 /workspace');
    const snap = await backend.snapshots.create(s, 'links', [], UNBOUNDED);
    const copy = join(install.home, 'snapshots', 'docker', 'links');
    expect(lstatSync(join(copy, 'home', 'hostlink')).isSymbolicLink()).toBe(true);
    expect(readlinkSync(join(copy, 'home', 'hostlink'))).toBe('/etc/hostname');
    expect(readlinkSync(join(copy, 'workspace', 'etc'))).toBe('/etc');
    expect(lstatSync(join(copy, 'home', 'pipe')).isFIFO()).toBe(true);
    expect(lines.find((l) => l.includes('snapshot links:'))).toContain('tmpfs /root, /workspace copied on the host');
    const fork = await backend.snapshots.createFrom(testSpec(install.installation, { ephemeral: true }), snap.ref, undefined);
    try {
      expect(await sh(fork, 'readlink /root/hostlink; cat /workspace/d/f; stat -c %a /workspace; test -p /root/pipe && echo fifo; ls /workspace/etc/hostname'))
        .toBe('/etc/hostname\nkept\n751\nfifo\n/workspace/etc/hostname\n');
      for (const ref of [s.ref, fork.ref]) expect((await docker.getContainer(ref).inspect()).State.Paused).toBe(false);
    } finally {
      await backend.remove(fork.ref, undefined);
      await backend.snapshots.remove(snap.ref);
    }
  }, 120_000);

  it('a fork unpacks its tmpfs dirs as it starts, before its warden answers, and keeps no archive; one whose files do not fit fails saying what tar said, leaving no container and the snapshot whole', async () => {
    const { install, backend } = setup();
    const s = await backend.ensure(testSpec(install.installation, { ephemeral: true }), undefined);
    await sh(s, 'head -c 3145728 /dev/zero > /workspace/three-mib && echo home > /root/h');
    const snap = await backend.snapshots.create(s, 'fill', [], UNBOUNDED);
    const stdioRoot = join(install.home, 'sandboxes', 'docker', '.stdio');
    const archives = (): string[] => readdirSync(stdioRoot).filter((d) => existsSync(join(stdioRoot, d, 'fill.tar')));

    // 1 MiB tmpfs dirs cannot hold the 3 MiB file: the start fails with tar's words.
    const small = testSpec(install.installation, { ephemeral: true, docker: { ephemeralSizeMb: 1 } });
    const err = await backend.snapshots.createFrom(small, snap.ref, undefined).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as Error).message).toContain('could not unpack its files as it started');
    expect((err as Error).message).toMatch(/tar exited [1-9][0-9]*: .*No space left on device/);
    expect((await backend.listManaged()).map((m) => m.ref)).toEqual([s.ref]);
    expect(readdirSync(stdioRoot)).toHaveLength(1); // the source's: the failed fork's went with it
    await backend.snapshots.verify(snap.ref);

    // Its record edited outside berth (valid JSON, nothing in it): refused as damaged, nothing made.
    const metaFile = join(install.home, 'snapshots', 'docker', 'fill', 'meta.json');
    const meta = readFileSync(metaFile, 'utf8');
    writeFileSync(metaFile, '{}');
    const damaged = await backend.snapshots.createFrom(testSpec(install.installation, { ephemeral: true }), snap.ref, undefined).catch((e: unknown) => e);
    expect((damaged as Error).message).toContain('does not say what the snapshot holds');
    expect((await backend.listManaged()).map((m) => m.ref)).toEqual([s.ref]);
    writeFileSync(metaFile, meta);

    // The same snapshot into a sandbox it fits: its files are there at its first command, as its user.
    const fork = await backend.snapshots.createFrom(testSpec(install.installation, { ephemeral: true }), snap.ref, undefined);
    try {
      expect(await sh(fork, 'stat -c %s /workspace/three-mib; cat /root/h; stat -c %u /workspace/three-mib')).toBe(`3145728\nhome\n${await sh(fork, 'id -u')}`);
      expect(archives()).toEqual([]);
      // Its main process, the init's one child, is the bash that unpacked them and then became the warden.
      const init = (await docker.getContainer(fork.ref).inspect()).State.Pid;
      const children = readFileSync(`/proc/${init}/task/${init}/children`, 'utf8').trim().split(' ');
      expect(children).toHaveLength(1);
      expect(readFileSync(`/proc/${children[0]}/cmdline`, 'utf8').split('\0').filter((a) => a !== '').at(-1)).toBe('berth-warden');
    } finally {
      await backend.remove(fork.ref, undefined);
      await backend.remove(s.ref, undefined);
      await backend.snapshots.remove(snap.ref);
    }
  }, 120_000);

  it('the host sees a container\'s tmpfs dirs only as dirs of their own mount, through a process that is still the container\'s: a link, a dir of the image or another process is refused', async () => {
    const { install, backend } = setup();
    const s = await backend.ensure(testSpec(install.installation, { ephemeral: true }), undefined);
    const view = hostViewOf(join(install.home, 'sandboxes', 'docker'), await docker.getContainer(s.ref).inspect());
    if (!('root' in view)) throw new Error(`this host should see the container: ${view.unavailable}`);
    expect(viewedDir(view, '/workspace')).toEqual({ dir: `${view.root}/workspace` });
    await sh(s, 'ln -s /etc /lnk');
    expect(viewedDir(view, '/lnk')).toEqual({ unavailable: '/lnk is not a dir in the container' });
    expect(viewedDir(view, '/etc')).toEqual({ unavailable: '/etc is not a mount of its own in the container' });
    expect(viewedDir(view, '/root/x')).toEqual({ unavailable: '/root/x is not a top-level dir' });
    expect(viewedDir({ ...view, containerId: 'f'.repeat(64) }, '/workspace')).toEqual({ unavailable: `process ${view.pid} is no longer the container's` });
    await backend.remove(s.ref, undefined);
  }, 120_000);

  it('a snapshot freezes the container through its cgroup and thaws it after; one a berth process that died left frozen is thawed when the next takes the sandbox, one a live process froze is not', async () => {
    const { install, backend } = setup();
    const spec = testSpec(install.installation, { ephemeral: true });
    const s = await backend.ensure(spec, undefined);
    const info = await docker.getContainer(s.ref).inspect();
    const line = readFileSync(`/proc/${info.State.Pid}/cgroup`, 'utf8').split('\n').find((l) => l.startsWith('0::'));
    const unified = readFileSync('/proc/mounts', 'utf8').split('\n').map((l) => l.split(' ')).find((f) => f[2] === 'cgroup2')?.[1];
    const group = join(unified!, line!.slice(3));
    const freezeFile = join(group, 'cgroup.freeze');
    const marker = join(install.home, 'sandboxes', 'docker', '.frozen', s.ref);
    // Seen while it runs: the cgroup set frozen (berth's freeze), and no pause asked of the engine.
    const since = Math.floor(Date.now() / 1000) - 1;
    let sawFrozen = false;
    const watch = setInterval(() => {
      if (readFileSync(freezeFile, 'utf8').trim() === '1') sawFrozen = true;
    }, 2);
    const snap = await backend.snapshots.create(s, 'frozen', [], UNBOUNDED).finally(() => clearInterval(watch));
    expect(sawFrozen).toBe(true);
    const events = await docker.getEvents({ since, until: Math.floor(Date.now() / 1000) + 1, filters: { container: [s.ref], event: ['pause', 'unpause'] } });
    let said = '';
    for await (const chunk of events) said += String(chunk);
    expect(said).toBe('');
    expect(readFileSync(freezeFile, 'utf8').trim()).toBe('0');
    expect(existsSync(marker)).toBe(false);
    expect((await docker.getContainer(s.ref).inspect()).State.Paused).toBe(false);
    await backend.snapshots.remove(snap.ref);

    // A live process's freeze (a snapshot under way in another berth) is left alone.
    writeFileSync(freezeFile, '1\n');
    writeFileSync(marker, `${ownerToken()}\n`);
    const other = new DockerBackend({ docker: defaultDocker(), installation: install.installation, berthHome: install.home });
    backends.push(other);
    await other.ensure(spec, s.ref);
    expect(readFileSync(freezeFile, 'utf8').trim()).toBe('1');
    // Its owner died (a pid that is no process): the next berth to take the sandbox thaws it, and it runs.
    writeFileSync(marker, '999999999:1\n');
    const third = new DockerBackend({ docker: defaultDocker(), installation: install.installation, berthHome: install.home });
    backends.push(third);
    const again = await third.ensure(spec, s.ref);
    expect(readFileSync(freezeFile, 'utf8').trim()).toBe('0');
    expect(existsSync(marker)).toBe(false);
    expect(await sh(again, 'echo thawed')).toBe('thawed\n');
    await third.remove(s.ref, undefined);
  }, 120_000);
});
