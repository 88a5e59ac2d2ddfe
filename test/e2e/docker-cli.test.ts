import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { runBerth, type CliRun } from '../helpers/cli.js';
import {
  containerFor,
  containerState,
  describeContainers,
  describeDocker,
  docker,
  dockerConfigYaml,
  installs,
  type TestInstall,
  dockerSuiteHooks,
} from '../helpers/docker-e2e.js';

/*
 * The issue-3 matrix through the real `berth` binary (compiled dist/) against the real engine.
 * Every `berth exec` is its own process, so these also prove what survives between processes.
 */

const reg = installs('berth-dcli-');

const CLI_TIMEOUT_MS = 30_000;

function berth(t: TestInstall, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<CliRun> {
  return runBerth(args, { env: opts.env ?? t.env, cwd: opts.cwd ?? t.dir, timeoutMs: CLI_TIMEOUT_MS });
}

/** `--json` result of one exec, with the raw run for failure messages. */
async function execJson(t: TestInstall, args: string[], opts: { cwd?: string } = {}): Promise<Record<string, unknown> & { run: CliRun }> {
  const run = await berth(t, ['exec', '--json', ...args], opts);
  try {
    return { ...(JSON.parse(run.stdout) as Record<string, unknown>), run };
  } catch {
    throw new Error(`berth exec --json ${args.join(' ')} printed no JSON (exit ${run.code}): ${run.stdout} ${run.stderr}`);
  }
}

describeDocker('berth CLI on the real docker engine', () => {
  dockerSuiteHooks(reg);

  it('--workspace DIR is visible at /workspace: host files readable inside, files written inside appear on the host', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false, workspace: { mount: true } }));
    const ws = t.userDir('project');
    writeFileSync(join(ws, 'host.txt'), 'from-host\n');
    const r = await berth(t, ['exec', '--session', 'm', '--workspace', ws, '--', 'cat /workspace/host.txt && echo inside > /workspace/made.txt && pwd']);
    expect(r).toEqual({ code: 0, stdout: 'from-host\n/workspace\n', stderr: '' });
    expect(readFileSync(join(ws, 'made.txt'), 'utf8')).toBe('inside\n');
  });

  it('refused workspaces exit 125 naming the path: the home dir itself, ~/.ssh, /, a missing dir, berth\'s state dir', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false, workspace: { mount: true } }));
    const home = t.mkdir('fake-home');
    const ssh = join(home, '.ssh');
    mkdirSync(ssh);
    const env = { ...t.env, HOME: home };
    const cases: [string, RegExp][] = [
      [home, /home directory/],
      [ssh, /credential surface/],
      ['/', /credential surface|root/],
      [join(t.root, 'missing-dir'), /does not exist/],
      [t.home, /credential surface/],
    ];
    for (const [dir, why] of cases) {
      const r = await berth(t, ['exec', '--session', 'x', '--workspace', dir, '--', 'echo should-not-run'], { env });
      expect(r.code, `${dir}: ${r.stderr}`).toBe(125);
      expect(r.stdout).toBe('');
      expect(r.stderr.split('\n').filter(Boolean), r.stderr).toHaveLength(1);
      expect(r.stderr).toContain(JSON.stringify(dir));
      expect(r.stderr).toMatch(why);
    }
    // Nothing ran, so nothing was created.
    expect(await t.containers()).toEqual([]);
  });

  it('system paths exit 125 as workspaces, naming the path, the rule and the fix: /etc, /usr, /boot, /var/lib, /var/lib/docker, /run, /run/docker, /run/containerd, /proc, /sys, /dev, /home', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false, workspace: { mount: true } }));
    const dirs = ['/etc', '/usr', '/boot', '/var/lib', '/var/lib/docker', '/run', '/run/docker', '/run/containerd', '/proc', '/sys', '/dev', '/home']
      .filter((d) => existsSync(d));
    expect(dirs).toContain('/etc');
    for (const dir of dirs) {
      const r = await berth(t, ['exec', '--session', 'x', '--workspace', dir, '--', 'echo should-not-run']);
      expect(r.code, `${dir}: ${r.stderr}`).toBe(125);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(new RegExp(`^berth: attached workspace "${dir}"( \\(real path "[^"]+"\\))? (is|is inside|contains) [^;]*(a system directory berth never exposes to a sandbox|holds other users' or services' files|credential surface)[^;]*; attach a project folder instead\\n$`));
    }
    expect((await berth(t, ['exec', '--session', 'x', '--workspace', '/etc', '--', 'true'])).stderr).toBe(
      'berth: attached workspace "/etc" is /etc, a system directory berth never exposes to a sandbox; attach a project folder instead\n',
    );
    expect(await t.containers()).toEqual([]);
  });

  it('workspace.allowedRoots: a workspace outside the roots exits 125 naming them; one inside mounts; a missing root is a config error (exit 2)', async () => {
    const t = reg.track();
    const root = t.mkdir('roots');
    const inside = t.userDir('roots', 'app');
    const outside = t.mkdir('elsewhere');
    t.writeConfig(dockerConfigYaml({ persistent: false, workspace: { mount: true, allowedRoots: [root] } }));
    const out = await berth(t, ['exec', '--session', 'o', '--workspace', outside, '--', 'echo should-not-run']);
    expect(out).toEqual({
      code: 125, stdout: '',
      stderr: `berth: attached workspace "${outside}" is not under an allowed root (workspace.allowedRoots: ${root}); attach a project folder under one of them, or add its root to workspace.allowedRoots\n`,
    });
    writeFileSync(join(inside, 'in.txt'), 'inside\n');
    expect(await berth(t, ['exec', '--session', 'i', '--workspace', inside, '--', 'cat /workspace/in.txt'])).toEqual({ code: 0, stdout: 'inside\n', stderr: '' });
    t.writeConfig(dockerConfigYaml({ persistent: false, workspace: { mount: true, allowedRoots: [join(t.root, 'gone')] } }));
    const missing = await berth(t, ['exec', '--session', 'i', '--', 'true']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`workspace.allowedRoots entry ${join(t.root, 'gone')} does not exist; create it or remove the entry`);
  });

  it('workspace.mount off: --workspace DIR mounts nothing, the command runs, explain says why', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const ws = t.mkdir('project');
    writeFileSync(join(ws, 'host.txt'), 'from-host\n');
    const r = await berth(t, ['exec', '--session', 'off', '--workspace', ws, '--', 'echo ran; ls /workspace']);
    expect(r).toEqual({ code: 0, stdout: 'ran\n', stderr: '' });
    const reason = `workspace.mount is off: the attached workspace "${ws}" is not mounted (set workspace.mount: true to mount it)`;
    const ex = await berth(t, ['explain', '--session', 'off', '--workspace', ws]);
    expect(ex.code, ex.stderr).toBe(0);
    expect(ex.stdout).toMatch(/^mount +\(none\)$/m);
    expect(ex.stdout).toContain(`mountReason  ${reason}`);
    const json = JSON.parse((await berth(t, ['explain', '--json', '--session', 'off', '--workspace', ws])).stdout) as Record<string, unknown>;
    expect(json).toMatchObject({ mount: null, mountReason: reason });
    const container = await containerFor(t.installation, 'session:off');
    const info = await docker.getContainer(container.id).inspect();
    expect(info.Mounts.filter((m) => m.Type === 'bind' && m.Source === ws)).toEqual([]);
  });

  it('a command over exec.maxOutputChars leaves nothing in $BERTH_HOME/spill (streamed whole; --json truncated, no path)', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false, exec: { maxOutputChars: 1000 } }));
    const spill = join(t.home, 'spill');
    const left = (): string[] => (existsSync(spill) ? readdirSync(spill) : []);
    const r = await berth(t, ['exec', '--session', 'sp', '--', 'head -c 50000 /dev/zero | tr "\\0" a']);
    expect(r).toEqual({ code: 0, stdout: 'a'.repeat(50_000), stderr: '' });
    const j = await execJson(t, ['--session', 'sp', '--', 'head -c 50000 /dev/zero | tr "\\0" b']);
    expect(j).toMatchObject({ truncated: true, exitCode: 0 });
    expect(j).not.toHaveProperty('fullOutputPath');
    expect(left()).toEqual([]);
    expect((await berth(t, ['close', '--session', 'sp'])).code).toBe(0);
  });

  it('a shared sandbox asked for a different mount exits 125 saying the mount is fixed', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ workspace: { mount: true } }));
    const a = t.userDir('a');
    const b = t.userDir('b');
    const first = await berth(t, ['exec', '--workspace', a, '--', 'true']);
    expect(first, first.stderr).toMatchObject({ code: 0 });
    const second = await berth(t, ['exec', '--workspace', b, '--', 'echo should-not-run']);
    expect(second.code).toBe(125);
    expect(second.stdout).toBe('');
    expect(second.stderr).toMatch(/^berth: sandbox "default" already mounts /);
    expect(second.stderr).toContain(a);
    expect(second.stderr).toContain(b);
    // The process cwd is the workspace of the default key: launching from b is the same conflict.
    writeFileSync(join(b, 'berth.yaml'), readFileSync(join(t.dir, 'berth.yaml')));
    const fromB = await berth(t, ['exec', '--', 'true'], { cwd: b });
    expect(fromB.code).toBe(125);
    expect(fromB.stderr).toContain(b);
  });

  it('bug 1: berth exec --session s2 from dir A does not inherit the mount the default call gave A', async () => {
    const t = reg.track();
    const dirA = t.userDir('dirA');
    t.writeConfig(dockerConfigYaml({ persistent: false, workspace: { mount: true } }), dirA);
    writeFileSync(join(dirA, 'only-in-a.txt'), 'a\n');
    const first = await berth(t, ['exec', '--', 'ls -A /workspace'], { cwd: dirA });
    expect(first).toEqual({ code: 0, stdout: 'berth.yaml\nonly-in-a.txt\n', stderr: '' });
    const second = await execJson(t, ['--session', 's2', '--', 'ls -A /workspace; pwd'], { cwd: dirA });
    expect(second, second.run.stderr).toMatchObject({ exitCode: 0, sandboxKey: 'session:s2', stdout: '/workspace\n' });
    const explain = await berth(t, ['explain', '--session', 's2', '--json'], { cwd: dirA });
    expect(JSON.parse(explain.stdout)).toMatchObject({ mount: null, sandboxKey: 'session:s2' });
    const c = await containerFor(t.installation, 'session:s2');
    const mounts = (await docker.getContainer(c.id).inspect()).Mounts.map((m) => m.Source);
    expect(mounts, `container ${c.id.slice(0, 12)}`).not.toContain(dirA);
  });

  it('bug 2: a host cwd recorded on local never fails a docker command with cd (exit 126); one under the mount maps to /workspace', async () => {
    const t = reg.track();
    const proj = t.userDir('proj');
    t.writeConfig('backend: local\npersistent: false\n');
    const onLocal = await berth(t, ['exec', '--session', 's', '--', 'mkdir -p sub && cd sub && pwd']);
    expect(onLocal.code, onLocal.stderr).toBe(0);
    const hostCwd = onLocal.stdout.trim();
    expect(hostCwd.startsWith(t.home)).toBe(true);
    const attached = await berth(t, ['exec', '--session', 'w', '--workspace', proj, '--', 'mkdir -p deep/er && cd deep/er && pwd']);
    expect(attached).toMatchObject({ code: 0, stdout: `${proj}/deep/er\n` });

    t.writeConfig(dockerConfigYaml({ persistent: false, workspace: { mount: true } }));
    const explain = await berth(t, ['explain', '--session', 's', '--json']);
    expect(JSON.parse(explain.stdout)).toMatchObject({ backend: 'docker', cwd: '/workspace' });
    const pwd = await berth(t, ['exec', '--session', 's', '--', 'pwd']);
    expect(pwd).toEqual({ code: 0, stdout: '/workspace\n', stderr: '' });
    const mapped = await berth(t, ['exec', '--session', 'w', '--workspace', proj, '--', 'pwd; ls -d /workspace/deep']);
    expect(mapped).toEqual({ code: 0, stdout: '/workspace/deep/er\n/workspace/deep\n', stderr: '' });
  });

  it('cwd, exported env, functions and aliases are restored across two separate berth exec processes', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const first = await berth(t, ['exec', '--session', 's', '--',
      'mkdir -p /workspace/a/b && cd /workspace/a/b && export GREETING=hi; greet() { echo "$GREETING $1"; }; alias ll="echo aliased"; hostname']);
    expect(first.code, first.stderr).toBe(0);
    const second = await execJson(t, ['--session', 's', '--', 'pwd; greet you; alias ll; hostname']);
    expect(second, second.run.stderr).toMatchObject({
      exitCode: 0, cwd: '/workspace/a/b', stdout: `/workspace/a/b\nhi you\nalias ll='echo aliased'\n${first.stdout}`,
    });
    const other = await berth(t, ['exec', '--session', 'other', '--', 'pwd; echo "${GREETING:-unset}"']);
    expect(other).toEqual({ code: 0, stdout: '/workspace\nunset\n', stderr: '' });
  });

  it('a subagent shares its parent\'s container but has its own shell, starting in the parent\'s cwd', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ scope: 'task', persistent: false }));
    const parent = await berth(t, ['exec', '--session', 's', '--task', 'parent', '--',
      'mkdir -p /workspace/w && cd /workspace/w && export ONLY_PARENT=1 && hostname']);
    expect(parent.code, parent.stderr).toBe(0);
    const child = await execJson(t, ['--session', 's', '--task', 'child', '--parent', 'parent', '--',
      'hostname; pwd; echo "${ONLY_PARENT:-unset}"; cd /tmp']);
    expect(child, child.run.stderr).toMatchObject({
      exitCode: 0, sandboxKey: 'parent', stdout: `${parent.stdout}/workspace/w\nunset\n`,
    });
    // The child's cd is its own: the parent is still where it was.
    const again = await berth(t, ['exec', '--session', 's', '--task', 'parent', '--', 'pwd; echo $ONLY_PARENT']);
    expect(again).toEqual({ code: 0, stdout: '/workspace/w\n1\n', stderr: '' });
    const list = await t.containers();
    expect(list, describeContainers(list)).toHaveLength(1);
  });

  it('berth close removes the ephemeral container and keeps the persistent one with its files', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    expect((await berth(t, ['exec', '--session', 'e', '--', 'touch /workspace/f'])).code).toBe(0);
    expect((await berth(t, ['exec', '--', 'echo kept > /workspace/keep'])).code).toBe(0);
    const eph = await containerFor(t.installation, 'session:e');
    const dflt = await containerFor(t.installation, 'default');
    const close = await berth(t, ['close', '--session', 'e']);
    expect(close).toEqual({ code: 0, stdout: 'closed; removed: session:e; kept: (none)\n', stderr: '' });
    expect(await containerState(eph.id), `container ${eph.id.slice(0, 12)}`).toBeUndefined();
    const closeDefault = await berth(t, ['close']);
    expect(closeDefault.stdout).toBe('closed; removed: (none); kept: default\n');
    expect((await containerState(dflt.id))?.running, `container ${dflt.id.slice(0, 12)}`).toBe(true);
    expect(readFileSync(join(t.home, 'sandboxes', 'docker', 'default', 'workspace', 'keep'), 'utf8')).toBe('kept\n');
    const ls = JSON.parse((await berth(t, ['ls', '--json'])).stdout) as { sandboxKey: string }[];
    expect(ls.map((s) => s.sandboxKey)).toEqual(['default']);
  });

  it('a container removed out of band between two berth exec is recreated; stderr says so once', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const first = await berth(t, ['exec', '--session', 'o', '--', 'touch /workspace/before']);
    expect(first).toEqual({ code: 0, stdout: '', stderr: '' });
    const before = await containerFor(t.installation, 'session:o');
    await docker.getContainer(before.id).remove({ force: true });
    const second = await berth(t, ['exec', '--session', 'o', '--', 'ls -A /workspace']);
    const after = await containerFor(t.installation, 'session:o');
    const where = `old ${before.id.slice(0, 12)}, new ${after.id.slice(0, 12)}`;
    expect(second.code, `${where}: ${second.stderr}`).toBe(0);
    expect(second.stdout).toBe('');
    expect(second.stderr).toBe('berth: sandbox "session:o" was gone (removed outside berth, or by berth\'s reaper after the process holding its session ended or it went idle) and was recreated empty for this command\n');
    expect(after.id).not.toBe(before.id);
    const third = await execJson(t, ['--session', 'o', '--', 'true']);
    expect(third.run).toMatchObject({ code: 0, stderr: '' });
    expect(third.sandboxRecreated, where).toBeUndefined();
  });

  it('four berth exec processes racing on one new ephemeral session create one container and all run in it', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const runs = await Promise.all([1, 2, 3, 4].map((i) => berth(t, ['exec', '--session', 'race', '--', `echo ${i} >> /workspace/log; hostname`])));
    for (const r of runs) expect(r, JSON.stringify(runs)).toMatchObject({ code: 0, stderr: '' });
    const hostnames = new Set(runs.map((r) => r.stdout));
    expect(hostnames.size, JSON.stringify(runs)).toBe(1);
    const only = await containerFor(t.installation, 'session:race');
    const log = await berth(t, ['exec', '--session', 'race', '--', 'sort /workspace/log | tr "\\n" " "']);
    expect(log.stdout, `container ${only.id.slice(0, 12)}`).toBe('1 2 3 4 ');
  });
});
