import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import type { CallScopeInput } from '../../src/scope/call-scope.js';
import { runBerth } from '../helpers/cli.js';
import {
  describeContainers,
  describeDocker,
  docker,
  dockerConfig,
  dockerConfigYaml,
  installs,
  type TestInstall,
  dockerSuiteHooks,
} from '../helpers/docker-e2e.js';

/*
 * Files in and out of real containers: the shared conformance suite, media translation per key
 * kind (each scope gets a path under its own sandbox's host dir), and the CLI (cp, media, audit).
 */

const reg = installs('berth-dfiles-');

/** Host source of the container's bind at `dest`, for the container of this key and tenant. */
async function bindSource(t: TestInstall, key: string, tenant: string, dest: string): Promise<string> {
  const all = await t.containers();
  const found = all.filter((c) => c.labels['berth.key'] === key && c.labels['berth.tenant'] === tenant);
  if (found.length !== 1) throw new Error(`expected one container for ${tenant}/${key}: ${describeContainers(all)}`);
  const info = await docker.getContainer(found[0]!.id).inspect();
  const m = info.Mounts.find((x) => x.Destination === dest);
  if (m?.Type !== 'bind') throw new Error(`container ${found[0]!.name} has no bind at ${dest}`);
  return m.Source;
}

describeDocker('file transfer on the real docker engine', () => {
  dockerSuiteHooks(reg);

  // The file-transfer conformance tests run in the backend conformance suite (backend-conformance-docker.test.ts).

  const cases: { mode: string; config: Record<string, unknown>; a: CallScopeInput; b: CallScopeInput; keyA: string; keyB: string; tenantB: string }[] = [
    { mode: 'session', config: { scope: 'session' }, a: { session: 'a' }, b: { session: 'b' }, keyA: 'session:a', keyB: 'session:b', tenantB: 'local' },
    { mode: 'user', config: { scope: 'user' }, a: { user: 'telegram:1', session: 'x' }, b: { user: 'telegram:2', session: 'x' }, keyA: 'user:telegram:1', keyB: 'user:telegram:2', tenantB: 'local' },
    { mode: 'profile', config: { scope: 'profile' }, a: { profile: 'alpha' }, b: { profile: 'beta' }, keyA: 'profile:alpha', keyB: 'profile:beta', tenantB: 'local' },
    { mode: 'shared', config: { scope: 'shared', sharedKey: 'team' }, a: {}, b: { tenant: 'other' }, keyA: 'shared:team', keyB: 'shared:team', tenantB: 'other' },
  ];
  for (const c of cases) {
    it(`media (mediaMode: live): scope ${c.mode} — each scope gets the file under its own sandbox's host dir`, async () => {
      const t = reg.track();
      const b = await t.open(dockerConfig({ persistent: true, files: { mediaMode: 'live' }, ...c.config }));
      await b.exec(c.a, 'echo from-a > /workspace/chart.txt; mkdir -p /root/out; echo home-a > /root/out/r.txt');
      await b.exec(c.b, 'echo from-b > /workspace/chart.txt');
      const ma = await b.files.mediaPath(c.a, '/workspace/chart.txt');
      const mb = await b.files.mediaPath(c.b, 'chart.txt');
      const wsA = await bindSource(t, c.keyA, 'local', '/workspace');
      const wsB = await bindSource(t, c.keyB, c.tenantB, '/workspace');
      expect(wsA).not.toBe(wsB);
      expect(ma).toEqual({ hostPath: join(wsA, 'chart.txt'), exported: false });
      expect(mb).toEqual({ hostPath: join(wsB, 'chart.txt'), exported: false });
      expect(readFileSync(ma.hostPath, 'utf8')).toBe('from-a\n');
      expect(readFileSync(mb.hostPath, 'utf8')).toBe('from-b\n');
      expect(wsA.startsWith(join(t.home, 'sandboxes', 'docker'))).toBe(true);
      const home = await b.files.mediaPath(c.a, '/root/out/r.txt');
      expect(home.hostPath).toBe(join(await bindSource(t, c.keyA, 'local', '/root'), 'out', 'r.txt'));
      expect(readFileSync(home.hostPath, 'utf8')).toBe('home-a\n');
      // /tmp is tmpfs even here: exported into the scope's staging dir instead.
      await b.exec(c.a, 'echo tmp-a > /tmp/t.txt');
      const tmp = await b.files.mediaPath(c.a, '/tmp/t.txt');
      expect(tmp.exported).toBe(true);
      expect(tmp.hostPath.startsWith(join(t.home, 'staging'))).toBe(true);
      expect(readFileSync(tmp.hostPath, 'utf8')).toBe('tmp-a\n');
    });
  }

  it('media (mediaMode: live): an ephemeral sandbox is exported into staging; an attached workspace maps to the mount itself', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: false, workspace: { mount: true }, files: { mediaMode: 'live' } }));
    await b.exec({ session: 'eph' }, 'echo eph > /workspace/m.txt');
    const eph = await b.files.mediaPath({ session: 'eph' }, '/workspace/m.txt');
    expect(eph.exported).toBe(true);
    expect(eph.hostPath.startsWith(join(t.home, 'staging', 'local'))).toBe(true);
    expect(readFileSync(eph.hostPath, 'utf8')).toBe('eph\n');
    const ws = t.userDir('project');
    const scope = { session: 'mnt', workspace: { path: ws, source: 'session' as const } };
    await b.exec(scope, 'mkdir -p out && echo mounted > out/m.txt');
    expect(await b.files.mediaPath(scope, 'out/m.txt')).toEqual({ hostPath: join(ws, 'out', 'm.txt'), exported: false });
  });

  /**
   * The agent swaps the file it names for a symlink to a host file, in a loop, while a gateway asks
   * for media paths and reads them. A live path under the sandbox's bind (the old default) can be
   * a symlink by the time it is read; a copy in staging never is.
   */
  async function mediaRace(mediaMode: 'copy' | 'live', tries: number): Promise<{ hits: number; served: number; paths: string[] }> {
    const t = reg.track();
    const secretFile = join(t.mkdir('host-secret'), 'secret.txt');
    writeFileSync(secretFile, 'HOST-SECRET-7f3a\n');
    const b = await t.open(dockerConfig({ persistent: true, files: { mediaMode } }));
    const s = { session: 'race' };
    await b.exec(s, 'echo public > /workspace/chart.txt');
    const { jobId } = await b.jobs.start(s, `cd /workspace; while :; do ln -s ${secretFile} l.tmp; mv -f l.tmp chart.txt; echo public > p.tmp; mv -f p.tmp chart.txt; done`);
    let hits = 0;
    let served = 0;
    const paths: string[] = [];
    try {
      for (let i = 0; i < tries; i++) {
        const m = await b.files.mediaPath(s, '/workspace/chart.txt').catch(() => undefined);
        if (m === undefined) continue;
        served++;
        paths.push(m.hostPath);
        let text: string | undefined;
        try {
          text = readFileSync(m.hostPath, 'utf8');
        } catch {
          text = undefined;
        }
        if (text?.includes('HOST-SECRET')) hits++;
      }
    } finally {
      await b.jobs.kill(s, jobId);
    }
    return { hits, served, paths };
  }

  it('media: by default a copy in staging, so an agent swapping the file for a symlink to a host file never gets it read', async () => {
    const r = await mediaRace('copy', 40);
    console.log(`media race (copy): ${r.served} of 40 served, ${r.hits} read the host secret`);
    // At least some calls landed between swaps (on a loaded machine few do): the test is not vacuous.
    expect(r.served).toBeGreaterThan(0);
    expect(r.hits).toBe(0);
    expect(r.paths.every((p) => p.includes('/staging/'))).toBe(true);
  }, 240_000);

  it('media: by default a copy even where the sandbox keeps the file on a host dir (persistent, attached workspace)', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: true, scope: 'session', workspace: { mount: true } }));
    await b.exec({ session: 'p' }, 'echo persistent > /workspace/c.txt');
    const p = await b.files.mediaPath({ session: 'p' }, '/workspace/c.txt');
    expect(p.exported).toBe(true);
    expect(p.hostPath.startsWith(join(t.home, 'staging', 'local'))).toBe(true);
    expect(readFileSync(p.hostPath, 'utf8')).toBe('persistent\n');
    // The copy stays what it was when the agent changes its own file afterwards.
    await b.exec({ session: 'p' }, 'echo changed > /workspace/c.txt');
    expect(readFileSync(p.hostPath, 'utf8')).toBe('persistent\n');
    const ws = t.userDir('project');
    const scope = { session: 'mnt', workspace: { path: ws, source: 'session' as const } };
    await b.exec(scope, 'echo mounted > m.txt');
    const m = await b.files.mediaPath(scope, 'm.txt');
    expect(m.exported).toBe(true);
    expect(m.hostPath.startsWith(join(t.home, 'staging'))).toBe(true);
    expect(readFileSync(m.hostPath, 'utf8')).toBe('mounted\n');
  });

  it('CLI: berth cp both ways (file and folder), berth media, berth audit --user --json', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const berth = (args: string[]) => runBerth(args, { env: t.env, cwd: t.dir, timeoutMs: 60_000 });
    const src = t.mkdir('work', 'src');
    writeFileSync(join(src, 'a.txt'), 'A\n');
    mkdirSync(join(src, 'sub'));
    writeFileSync(join(src, 'sub', 'b.txt'), 'B\n');
    const u = ['--user', 'telegram:42'];
    expect(await berth(['cp', ...u, 'src/a.txt', 'sandbox:/workspace'])).toEqual({ code: 0, stdout: '', stderr: '' });
    expect(await berth(['cp', ...u, 'src', 'sandbox:/workspace/tree'])).toMatchObject({ code: 0, stderr: '' });
    const ls = await berth(['exec', ...u, '--', 'cat /workspace/a.txt /workspace/tree/sub/b.txt']);
    expect(ls).toMatchObject({ code: 0, stdout: 'A\nB\n' });
    const back = t.mkdir('work', 'back');
    const down = await berth(['cp', ...u, '--json', 'sandbox:/workspace/tree', 'back']);
    expect(down.code, down.stderr).toBe(0);
    expect(JSON.parse(down.stdout)).toMatchObject({ direction: 'download', kind: 'dir', path: join(back, 'tree') });
    expect(readFileSync(join(back, 'tree', 'sub', 'b.txt'), 'utf8')).toBe('B\n');
    const file = await berth(['cp', ...u, 'sandbox:a.txt', 'back/copy.txt']);
    expect(file.code, file.stderr).toBe(0);
    expect(readFileSync(join(back, 'copy.txt'), 'utf8')).toBe('A\n');
    const media = await berth(['media', ...u, '/workspace/a.txt']);
    expect(media.code, media.stderr).toBe(0);
    expect(readFileSync(media.stdout.trim(), 'utf8')).toBe('A\n');
    const refused = await berth(['cp', ...u, 'sandbox:/proc/self/environ', 'back/']);
    expect(refused.code).toBe(125);
    expect(refused.stderr).toMatch(/^berth: sandbox path "\/proc\/self\/environ" .*is under \/proc/);
    const bad = await berth(['cp', ...u, 'src/a.txt', 'back/x']);
    expect(bad).toMatchObject({ code: 2, stdout: '' });
    expect(bad.stderr).toMatch(/prefix exactly one of SRC and DEST with "sandbox:"/);
    const audit = await berth(['audit', '--user', 'telegram:42', '--json']);
    expect(audit.code, audit.stderr).toBe(0);
    const entries = JSON.parse(audit.stdout) as { kind: string; user: string; command: string; exitCode: number | null }[];
    expect(entries.map((e) => e.kind)).toEqual(['export', 'media', 'export', 'export', 'exec', 'upload', 'upload', 'upload']);
    expect(entries.every((e) => e.user === 'telegram:42')).toBe(true);
    // "cp a.txt sandbox:/workspace": the try at the folder itself is recorded as failed, then the copy into it.
    expect(entries.slice(-2).map((e) => [e.command, e.exitCode])).toEqual([
      ['upload /workspace/a.txt (2 bytes)', 0], ['upload /workspace (2 bytes) [failed: usage]', null],
    ]);
    expect(entries[0]).toMatchObject({ command: 'export /proc/self/environ [failed: policy_refused]', exitCode: null });
    const none = await berth(['audit', '--user', 'telegram:43']);
    expect(none).toEqual({ code: 0, stdout: 'no audit entries\n', stderr: '' });
    const badUser = await berth(['audit', '--user', 'telegram']);
    expect(badUser.code).toBe(2);
    expect(badUser.stderr).toMatch(/expected the form `platform:id`/);
    expect((await berth(['close', ...u])).code).toBe(0);
  });
});
