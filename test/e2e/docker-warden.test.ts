import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import type { Sandbox } from '../../src/backends/backend.js';
import { createOptions, WARDEN_LABEL } from '../../src/backends/docker/container-spec.js';
import { DockerBackend } from '../../src/backends/docker/docker-backend.js';
import { BerthError } from '../../src/errors.js';
import { wardenFor, type Warden } from '../../src/shell/warden.js';
import { removeInstallationContainers, testInstallation, testSpec } from '../helpers/docker.js';
import { describeDocker, docker, dockerConfig, ensureImage, IMAGE, installs, waitFor } from '../helpers/docker-e2e.js';
import { unmountAllUnder } from '../helpers/mounts.js';

/** A static program that starts N idle threads and waits (built here: the test image has none). */
function threadedIdler(): Buffer {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-threads-'));
  try {
    writeFileSync(path.join(dir, 't.c'), [
      '#include <pthread.h>', '#include <stdlib.h>', '#include <unistd.h>',
      'static void *idle(void *a) { (void)a; for (;;) pause(); return 0; }',
      'int main(int c, char **v) { int n = c > 1 ? atoi(v[1]) : 1; pthread_t t;',
      '  for (int i = 0; i < n; i++) if (pthread_create(&t, 0, idle, 0)) return 1;',
      '  for (;;) pause(); }', '',
    ].join('\n'));
    try {
      execFileSync('gcc', ['-static', '-pthread', '-O2', '-s', '-o', path.join(dir, 't'), path.join(dir, 't.c')], { stdio: 'pipe' });
    } catch (err) {
      throw new Error(`this test builds a small threaded program and needs gcc with a static libc (apt-get install -y gcc libc6-dev): ${String(err)}`);
    }
    return readFileSync(path.join(dir, 't'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/*
 * The warden is a docker sandbox's main process (container-spec.ts): berth attaches to it instead
 * of starting an exec, so an idle sandbox costs the engine one exec (its shell), not two.
 */
describeDocker('docker: the warden is the sandbox\'s main process', () => {
  const installation = testInstallation('warden');
  let berthHome: string;
  let backend: DockerBackend;
  const wardens: Warden[] = [];
  const reg = installs('berth-warden-');

  beforeAll(async () => {
    await ensureImage();
    berthHome = await mkdtemp(path.join(os.tmpdir(), 'berth-warden-e2e-'));
    backend = new DockerBackend({ docker, installation, berthHome });
  });

  afterEach(async () => {
    for (const w of wardens.splice(0)) await w.close();
    await reg.cleanupAll();
  });

  afterAll(async () => {
    await backend?.close();
    await removeInstallationContainers(docker, installation);
    if (berthHome) {
      // Persistent sandboxes' disk images are mounted under it: down before the dir goes.
      unmountAllUnder(berthHome);
      await rm(berthHome, { recursive: true, force: true });
    }
  });

  const warden = (sandbox: Sandbox): Warden => {
    const w = wardenFor(sandbox, { mayKillAll: true, timeoutMs: 10_000 });
    wardens.push(w);
    return w;
  };
  /** The test image changed by `cmd` (run as root), committed to a throwaway tag; the caller removes it. */
  const derivedImage = async (repo: string, cmd: string[]): Promise<string> => {
    const tag = `${repo}:${installation.slice(0, 12)}`;
    const maker = await docker.createContainer({ Image: IMAGE, Entrypoint: [], User: 'root', Cmd: cmd });
    try {
      await maker.start();
      expect((await maker.wait()).StatusCode).toBe(0);
      await maker.commit({ repo, tag: installation.slice(0, 12) });
    } finally {
      await maker.remove({ force: true });
    }
    return tag;
  };
  const execIds = async (ref: string): Promise<string[]> => (await docker.getContainer(ref).inspect()).ExecIDs ?? [];
  /** The main process: the init's child. */
  const mainPid = async (sandbox: Sandbox): Promise<number> => {
    const r = await sandbox.execOnce(['sh', '-c', "ps -o pid,ppid | awk '$2 == 1 { print $1 }'"]);
    return Number(r.stdout.toString('utf8').trim());
  };

  it('a new container runs the warden as its main process, with stdin kept open and no log kept', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    const info = await docker.getContainer(sandbox.ref).inspect();
    expect(info.Config.Labels?.[WARDEN_LABEL]).toBe('resident');
    expect(info.Config.Cmd?.slice(0, 4)).toEqual(['bash', '--noprofile', '--norc', '-c']);
    expect(info.Config).toMatchObject({ OpenStdin: true, StdinOnce: false, Tty: false });
    expect(info.HostConfig.LogConfig?.Type).toBe('none');
    expect(sandbox.attachWarden).toBeTypeOf('function');
  });

  it('attaching starts nothing in the sandbox: the warden answers with the main process\'s pid', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    const w = warden(sandbox);
    await w.start();
    expect(w.isReady()).toBe(true);
    // Checked before anything else runs there: an exec'd warden would be listed.
    expect(await execIds(sandbox.ref)).toEqual([]);
    const pid = await w.pid();
    expect(pid).toBe(await mainPid(sandbox));
    expect(await w.signal(pid!, '0')).toBe(true);
    expect(await w.outOfPids()).toBe(false);
  });

  it('a timeout says whether the sandbox is out of pids without the command\'s tree (what holds them is not the command)', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true, docker: { pidsLimit: 32 } }), undefined);
    const w = warden(sandbox);
    await w.start();
    // Counted by the engine: an exec would need pids of its own.
    const pids = async (): Promise<number> =>
      ((await docker.getContainer(sandbox.ref).stats({ stream: false })) as { pids_stats?: { current?: number } }).pids_stats?.current ?? -1;
    // 26 sleeps, the init and the warden: 28 of 32, within berth's margin of 8 (the command holds none).
    const hog = (env: string[]) => sandbox.execOnce(['env', ...env, 'sh', '-c', 'for i in $(seq 26); do sleep 300 & done >/dev/null 2>&1']);
    const tree = { shellPid: 999_999, shellTag: 'c2hlbGw', protectedPgids: [] };

    await hog([]);
    expect(await pids()).toBe(28);
    expect(await w.outOfPids()).toBe(true);
    expect(await w.timeout({ ...tree, cmdTag: 'bm90LWl0' })).toEqual({ killed: 0, shell: 'gone', stillFull: true });
    await w.endAll();
    expect(await waitFor(async () => (await pids()) === 2, 5_000, 100)).toBe(true);

    // The same sleeps as the command's own tree: killing it makes the room.
    await hog(['BERTH_CMD_TAG=dGhlLWNtZA']);
    expect(await w.outOfPids()).toBe(true);
    expect(await w.timeout({ ...tree, cmdTag: 'dGhlLWNtZA' })).toEqual({ killed: 26, shell: 'gone', stillFull: false });
    expect(await waitFor(async () => (await pids()) === 2, 5_000, 100)).toBe(true);

    // One process of the command with 25 threads (a JVM, a compiler): the limit counts threads.
    const binary = threadedIdler();
    const t = await sandbox.openShell({ env: {}, cwd: '/' });
    t.stdin.end(Buffer.concat([Buffer.from('exec cat > /tmp/threads\n'), binary]));
    expect(await t.exited).toBe(0);
    await sandbox.execOnce(['env', 'BERTH_CMD_TAG=dGhyZWFkcw', 'sh', '-c', 'chmod +x /tmp/threads && /tmp/threads 24 >/dev/null 2>&1 &']);
    expect(await waitFor(async () => (await pids()) === 27, 5_000, 100)).toBe(true);
    expect(await w.outOfPids()).toBe(true);
    expect(await w.timeout({ ...tree, cmdTag: 'dGhyZWFkcw' })).toEqual({ killed: 1, shell: 'gone', stillFull: false });
  });

  it('two attachments at once (two berth processes) each get the replies to their own operations', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    const a = warden(sandbox);
    const b = warden(sandbox);
    await Promise.all([a.start(), b.start()]);
    const pid = await a.pid();
    expect(await b.pid()).toBe(pid);
    // A sleeper to ask about, and a pid that is not there: the answers differ, so a reply handed
    // to the wrong caller would show.
    const sleeper = Number((await sandbox.execOnce(['sh', '-c', 'sleep 300 >/dev/null 2>&1 & echo $!'])).stdout.toString('utf8').trim());
    const asks = Array.from({ length: 20 }, (_, i) => (i % 2 === 0
      ? a.signal(sleeper, '0').then((r) => ['a', r])
      : b.signal(999_999, '0').then((r) => ['b', r])));
    for (const [who, alive] of await Promise.all(asks)) expect(alive, `${String(who)}`).toBe(who === 'a');
    expect(await a.signal(sleeper, 'KILL')).toBe(true);
    expect(await waitFor(async () => !(await b.signal(sleeper, '0')), 5_000, 100)).toBe(true);
  });

  it('letting go of the warden leaves it (and its container) running for the next attachment', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    const first = warden(sandbox);
    await first.start();
    const pid = await first.pid();
    await first.close();
    await new Promise((r) => setTimeout(r, 1_500));
    expect((await docker.getContainer(sandbox.ref).inspect()).State.Running).toBe(true);
    const second = warden(sandbox);
    await second.start();
    expect(await second.pid()).toBe(pid);
  });

  it('a command that ends the warden stops its container; a new attachment then fails at once, saying so', async () => {
    const sandbox = await backend.ensure(testSpec(installation, { ephemeral: true }), undefined);
    const pid = await mainPid(sandbox);
    await sandbox.execOnce(['sh', '-c', `kill -9 ${pid}`]).catch(() => undefined);
    expect(await waitFor(async () => !(await docker.getContainer(sandbox.ref).inspect()).State.Running, 10_000, 100)).toBe(true);
    // The engine would hold an attach to a stopped container until its next start.
    const err = await sandbox.attachWarden!().then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as Error).message).toMatch(/could not attach to the warden of container [0-9a-f]{12}: the container is not running/);
  });

  it('an idle session holds one exec in the engine (its shell), not two', async () => {
    const t = reg.track();
    const broker = await t.open(dockerConfig({ persistent: false }));
    await broker.exec({ session: 's' }, 'true');
    // The warden starts beside the first shell (not waited for); give it a moment.
    await new Promise((r) => setTimeout(r, 1_000));
    const [c] = await t.containers();
    expect(c).toBeDefined();
    expect(await execIds(c!.id)).toHaveLength(1);
    const r = await broker.exec({ session: 's' }, 'sleep 30', { timeoutSeconds: 1 });
    expect(r.timedOut).toBe(true);
    expect((await broker.exec({ session: 's' }, 'echo ok')).stdout).toBe('ok\n');
  });

  it('a command that kills the warden stops the sandbox; the next call starts it again and says what that emptied', async () => {
    const t = reg.track();
    const broker = await t.open(dockerConfig({ persistent: false }));
    const S = { session: 'k' };
    await broker.exec(S, 'echo kept > /workspace/f');
    const [c] = await t.containers();
    await broker.exec(S, "kill -9 $(ps -o pid,ppid | awk '$2 == 1 { print $1 }'); sleep 5", { timeoutSeconds: 10 }).catch(() => undefined);
    expect(await waitFor(async () => !(await docker.getContainer(c!.id).inspect()).State.Running, 10_000, 100)).toBe(true);
    // The call that finds the shell gone may report that first; one of the next two starts it again.
    let said = '';
    let last = { exitCode: -1, stdout: '' };
    for (let i = 0; i < 2 && last.exitCode !== 0; i++) {
      last = await broker.exec(S, 'cat /workspace/f 2>/dev/null; echo done', { timeoutSeconds: 20 });
      said += (last as { stderr?: string }).stderr ?? '';
    }
    expect(last).toMatchObject({ exitCode: 0, stdout: 'done\n' });
    expect(said).toContain('berth: sandbox "session:k" had stopped (its main process ended, or it was stopped from outside), so it was started again: ' +
      'every process in it had ended and /root, /tmp, /workspace (tmpfs) were emptied\n');
  });

  it('an image without bash: the sandbox fails to start with an error that says so, and nothing is left', async () => {
    // The test image with its bash removed, committed to a throwaway tag.
    const tag = await derivedImage('berth-test-nobash', ['rm', '/bin/bash', '/bin/bash-static']);
    try {
      const spec = testSpec(installation, { ephemeral: true, docker: { image: tag } });
      // The start waits for the warden's first line, so the failure is the start's every time
      // (an inspect right after the start used to miss it: the init fails a moment later).
      const err = await backend.ensure(spec, undefined).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BerthError);
      expect((err as BerthError).code).toBe('sandbox_start_failed');
      expect((err as Error).message).toContain(`image "${tag}" has no bash on its PATH`);
      expect((err as Error).message).toContain('use an image that has it (berth image build makes one)');
      expect(await docker.listContainers({ all: true, filters: { ancestor: [tag] } })).toEqual([]);

      // Through a broker, as a user meets it: each call says so, the same way, and leaves nothing.
      const t = reg.track();
      const broker = await t.open(dockerConfig({ persistent: false, docker: { image: tag } }));
      for (const session of ['a', 'b', 'c']) {
        const failed = await broker.exec({ session }, 'true').catch((e: unknown) => e);
        expect(failed).toBeInstanceOf(BerthError);
        expect((failed as BerthError).code).toBe('sandbox_start_failed');
        expect((failed as Error).message).toContain(`image "${tag}" has no bash on its PATH`);
      }
      expect(await docker.listContainers({ all: true, filters: { ancestor: [tag] } })).toEqual([]);
    } finally {
      await docker.getImage(tag).remove({ force: true }).catch(() => undefined);
    }
  });

  it('a bash that ends a moment after the start (one too old for berth\'s script, say): the start says so, nothing is left', async () => {
    // An inspect right after the start sees this one running; the start waits for the warden's first line.
    const tag = await derivedImage('berth-test-slowfail',
      ['/bin/busybox', 'sh', '-c', 'rm /bin/bash && printf "#!/bin/busybox sh\\nsleep 0.5\\nexit 2\\n" > /bin/bash && chmod 755 /bin/bash']);
    try {
      const spec = testSpec(installation, { ephemeral: true, docker: { image: tag } });
      const err = await backend.ensure(spec, undefined).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BerthError);
      expect((err as BerthError).code).toBe('sandbox_start_failed');
      expect((err as Error).message).toContain('the sandbox stopped as soon as it started: its main process (bash) exited with 2');
      expect(await docker.listContainers({ all: true, filters: { ancestor: [tag] } })).toEqual([]);
    } finally {
      await docker.getImage(tag).remove({ force: true }).catch(() => undefined);
    }
  });

  it('createOptions: the main process is the warden, stdin open for good, no log driver', () => {
    const spec = testSpec(installation, { ephemeral: true });
    const o = createOptions({ spec, name: 'n', image: 'i', hostDir: undefined, limits: { hostConfig: {}, errors: [], warnings: [] }, runAs: undefined, networkMode: 'none' });
    expect(o.Cmd?.slice(0, 4)).toEqual(['bash', '--noprofile', '--norc', '-c']);
    expect(o.Cmd?.at(-1)).toBe('berth-warden');
    expect(o.Cmd?.[4]).toContain('while read -r -a __w');
    expect(o).toMatchObject({ OpenStdin: true, StdinOnce: false, Labels: { [WARDEN_LABEL]: 'resident' } });
    expect(o.HostConfig?.LogConfig).toEqual({ Type: 'none', Config: {} });
  });
});
