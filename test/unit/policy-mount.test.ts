import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PolicyRefusedError, UsageError } from '../../src/errors.js';
import {
  assertMountCompatible,
  hostMountFs,
  inContainerPathReason,
  resolveMount,
  type MountInput,
} from '../../src/policy/mount.js';
import type { AttachedWorkspace } from '../../src/scope/call-scope.js';

let tmp: string;
let home: string;
let project: string;
let state: string;
let runDir: string;

beforeAll(() => {
  tmp = realpathSync(mkdtempSync(path.join(tmpdir(), 'berth-mount-')));
  home = path.join(tmp, 'home', 'ana');
  project = path.join(home, 'projects', 'app');
  state = path.join(home, '.berth');
  runDir = path.join(tmp, 'run');
  for (const dir of [project, state, path.join(home, '.ssh', 'keys'), path.join(home, '.config'), runDir]) {
    mkdirSync(dir, { recursive: true });
  }
  writeFileSync(path.join(runDir, 'docker.sock'), '');
  writeFileSync(path.join(home, 'notes.txt'), '');
  symlinkSync(path.join(home, '.ssh'), path.join(home, 'projects', 'ssh-link'));
  symlinkSync(project, path.join(tmp, 'app-link'));
});

afterAll(() => {
  rmSync(tmp, { recursive: true, force: true });
});

function input(workspace: AttachedWorkspace | undefined, over: Partial<MountInput> = {}): MountInput {
  return {
    key: 'session:s1',
    shared: false,
    workspace,
    mountEnabled: true,
    containerBackend: true,
    homeDir: home,
    stateDir: state,
    dockerSockets: [path.join(runDir, 'docker.sock')],
    allowedRoots: [],
    fs: hostMountFs,
    ...over,
  };
}

const session = (p: string): AttachedWorkspace => ({ path: p, source: 'session' });
const proc = (p: string): AttachedWorkspace => ({ path: p, source: 'process' });

describe('resolveMount on container backends', () => {
  it('mounts the attached workspace, reported as its real path', () => {
    expect(resolveMount(input(session(path.join(tmp, 'app-link'))))).toEqual({
      mount: project,
      mountReason: 'the workspace attached to the call',
      startDir: undefined,
    });
  });

  it('the attached workspace wins in shared modes too', () => {
    for (const key of ['default', 'profile:p', 'shared:k']) {
      const r = resolveMount(input(session(project), { key, shared: true }));
      expect(r.mount).toBe(project);
      expect(r.mountReason).toMatch(/shared sandbox/);
    }
  });

  it('no workspace: nothing mounted', () => {
    expect(resolveMount(input(undefined))).toEqual({ mount: null, mountReason: 'no workspace attached', startDir: undefined });
  });

  it('mounts a process cwd for the default key', () => {
    expect(resolveMount(input(proc(project), { key: 'default', shared: true })).mount).toBe(project);
  });

  it('never mounts a process cwd for any other key, and that is not an error', () => {
    for (const key of ['session:s1', 'profile:p', 'shared:k', 'user:telegram:1', 't1']) {
      const r = resolveMount(input(proc(home), { key }));
      expect(r.mount).toBeNull();
      expect(r.mountReason).toMatch(/launch artifact.*only for the default key/);
    }
  });

  it('workspace.mount off: a process cwd is just not mounted', () => {
    expect(resolveMount(input(proc(project), { key: 'default', mountEnabled: false }))).toEqual({
      mount: null,
      mountReason: 'workspace.mount is off',
      startDir: undefined,
    });
  });

  it('workspace.mount off: an attached workspace is not mounted, the reason says so, and the call goes on', () => {
    expect(resolveMount(input(session(project), { mountEnabled: false }))).toEqual({
      mount: null,
      mountReason: `workspace.mount is off: the attached workspace "${project}" is not mounted (set workspace.mount: true to mount it)`,
      startDir: undefined,
    });
    // Nothing reaches the sandbox, so nothing is refused either (a gateway's folder may not even exist here).
    expect(resolveMount(input(session(path.join(tmp, 'nope')), { mountEnabled: false, key: 'default', shared: true })).mount).toBeNull();
  });

  it.each(['/etc', '/usr', '/boot', '/var/lib', '/run', '/proc', '/sys', '/dev', '/home', '/tmp'])(
    'refuses the system path %s as an attached workspace, naming the path, the rule and the fix',
    (p) => {
      // A file system where every path exists as itself: the rule, not the machine, decides.
      const call = () => resolveMount(input(session(p), { fs: { realpath: (x) => x, isDirectory: () => true } }));
      expect(call).toThrow(PolicyRefusedError);
      expect(call).toThrow(new RegExp(`^attached workspace "${p.replace(/\//g, '\\/')}" (is|contains) .*; attach a project folder instead$`));
    },
  );

  it('refuses /etc on the real file system too', () => {
    expect(() => resolveMount(input(session('/etc')))).toThrow(
      'attached workspace "/etc" is /etc, a system directory berth never exposes to a sandbox; attach a project folder instead',
    );
  });

  it('refuses what lies inside a system directory: /var/lib/docker, /etc/cron.d', () => {
    for (const p of ['/var/lib/docker', '/etc/cron.d']) {
      if (hostMountFs.realpath(p) === undefined) continue;
      expect(() => resolveMount(input(session(p)))).toThrow(/inside \/(var\/lib|etc), a system directory berth never exposes to a sandbox; attach a project folder instead/);
    }
    expect(() => resolveMount(input(session('/etc/cron.d'), { fs: { realpath: (p) => p, isDirectory: () => true } }))).toThrow(
      'attached workspace "/etc/cron.d" is inside /etc, a system directory berth never exposes to a sandbox; attach a project folder instead',
    );
  });

  describe('workspace.allowedRoots', () => {
    it('mounts a workspace under an allowed root (by real path), refuses one outside, naming the roots and the fix', () => {
      const roots = [path.join(home, 'projects'), path.join(tmp, 'elsewhere')];
      expect(resolveMount(input(session(project), { allowedRoots: roots })).mount).toBe(project);
      expect(resolveMount(input(session(path.join(home, 'projects')), { allowedRoots: roots })).mount).toBe(path.join(home, 'projects'));
      // app-link lives outside the roots, but its real path is inside one: allowed.
      expect(resolveMount(input(session(path.join(tmp, 'app-link')), { allowedRoots: roots })).mount).toBe(project);
      const outside = path.join(tmp, 'run');
      const call = () => resolveMount(input(session(outside), { allowedRoots: [path.join(home, 'projects')], dockerSockets: [] }));
      expect(call).toThrow(PolicyRefusedError);
      expect(call).toThrow(
        `attached workspace "${outside}" is not under an allowed root (workspace.allowedRoots: ${path.join(home, 'projects')}); ` +
          'attach a project folder under one of them, or add its root to workspace.allowedRoots',
      );
    });

    it('a symlink inside a root that points out of it is judged by where it points', () => {
      const root = path.join(tmp, 'roots', 'r1');
      mkdirSync(root, { recursive: true });
      const escape = path.join(root, 'escape');
      symlinkSync(runDir, escape);
      expect(() => resolveMount(input(session(escape), { allowedRoots: [root], dockerSockets: [] }))).toThrow(/is not under an allowed root/);
    });

    it('a root given through a symlink matches by its real path; a root that vanished allows nothing', () => {
      expect(resolveMount(input(session(project), { allowedRoots: [path.join(tmp, 'app-link')] })).mount).toBe(project);
      expect(() => resolveMount(input(session(project), { allowedRoots: [path.join(tmp, 'gone')] }))).toThrow(/not under an allowed root/);
    });

    it('a sibling with the root as a name prefix is outside it', () => {
      mkdirSync(path.join(home, 'projects-old'), { recursive: true });
      expect(() => resolveMount(input(session(path.join(home, 'projects-old')), { allowedRoots: [path.join(home, 'projects')] }))).toThrow(
        /not under an allowed root/,
      );
    });

    it('applies on local too (the start dir) and to a process cwd for the default key', () => {
      const roots = [path.join(tmp, 'roots')];
      expect(() => resolveMount(input(session(project), { allowedRoots: roots, containerBackend: false }))).toThrow(/not under an allowed root/);
      expect(() => resolveMount(input(proc(project), { allowedRoots: roots, key: 'default', shared: true }))).toThrow(/not under an allowed root/);
    });
  });

  const refusals: [string, () => string, RegExp][] = [
    ['/', () => '/', /"\/" is the filesystem root/],
    ['the home dir itself', () => home, /home directory itself/],
    ['~/.ssh', () => path.join(home, '.ssh'), /is ~\/\.ssh/],
    ['a dir inside ~/.ssh', () => path.join(home, '.ssh', 'keys'), /inside ~\/\.ssh/],
    ['an ancestor of ~/.ssh (and of home)', () => path.join(tmp, 'home'), /contains the home directory/],
    ['~/.config', () => path.join(home, '.config'), /~\/\.config/],
    ['a symlink into ~/.ssh', () => path.join(home, 'projects', 'ssh-link'), /real path .*\) is ~\/\.ssh/],
    ['the state dir', () => state, /berth's state dir/],
    ['the docker socket dir', () => runDir, /contains a docker socket/],
    ['a /workspace path', () => '/workspace/app', /in-sandbox path \(\/workspace/],
    ['/workspace itself', () => '/workspace', /in-sandbox path/],
    ['a /root path when home is elsewhere', () => '/root/app', /in-sandbox path \(\/root/],
    ['a missing dir', () => path.join(tmp, 'nope'), /does not exist/],
    ['a file', () => path.join(home, 'notes.txt'), /not a directory/],
  ];

  it.each(refusals)('refuses an attached %s, naming the path', (_what, p, reason) => {
    const call = () => resolveMount(input(session(p())));
    expect(call).toThrow(PolicyRefusedError);
    expect(call).toThrow(reason);
    expect(call).toThrow(p());
  });

  it.each(refusals)('refuses a process cwd of %s for the default key', (_what, p, reason) => {
    expect(() => resolveMount(input(proc(p()), { key: 'default', shared: true }))).toThrow(reason);
  });

  it('a relative path is a usage error', () => {
    expect(() => resolveMount(input(session('projects/app')))).toThrow(UsageError);
  });
});

describe('resolveMount on non-container backends', () => {
  const local = { containerBackend: false };

  it('never mounts; an attached workspace becomes the starting dir, mount setting or not', () => {
    for (const mountEnabled of [true, false]) {
      const r = resolveMount(input(session(path.join(tmp, 'app-link')), { ...local, mountEnabled }));
      expect(r.mount).toBeNull();
      expect(r.startDir).toBe(project);
      expect(r.mountReason).toMatch(/never mount/);
    }
  });

  it('a process cwd is the starting dir for the default key only', () => {
    expect(resolveMount(input(proc(project), { ...local, key: 'default' })).startDir).toBe(project);
    expect(resolveMount(input(proc(project), { ...local, key: 'session:s1' })).startDir).toBeUndefined();
  });

  it('an attached workspace goes through the same refusals', () => {
    expect(() => resolveMount(input(session(home), local))).toThrow(/home directory itself/);
    expect(() => resolveMount(input(session('/workspace/x'), local))).toThrow(/in-sandbox/);
    expect(() => resolveMount(input(session(path.join(tmp, 'nope')), local))).toThrow(/does not exist/);
  });

  it('a process cwd that fails a rule is not used, without failing the call', () => {
    const r = resolveMount(input(proc(home), { ...local, key: 'default' }));
    expect(r).toMatchObject({ mount: null, startDir: undefined });
    expect(r.mountReason).toMatch(/home directory itself/);
  });
});

describe('inContainerPathReason', () => {
  it('/root is a real host path when berth runs as root', () => {
    // With homeDir /root, /root/app is the operator's own project on the host, judged by the other rules.
    expect(inContainerPathReason('/root/app', '/root')).toBeUndefined();
    expect(inContainerPathReason('/root/app', '/home/ana')).toMatch(/\/root/);
    expect(inContainerPathReason('/rootfs/app', '/home/ana')).toBeUndefined();
  });

  it('/workspaces (the devcontainer convention) is not /workspace', () => {
    expect(inContainerPathReason('/workspaces/app', '/home/ana')).toBeUndefined();
    expect(inContainerPathReason('/workspace/../srv', '/home/ana')).toBeUndefined();
  });

  it('as root, /root itself is still the home dir and /root/app mounts', () => {
    const fakeFs = { realpath: (p: string) => p, isDirectory: () => true };
    const asRoot = { homeDir: '/root', stateDir: '/root/.berth', fs: fakeFs };
    expect(resolveMount(input(session('/root/app'), asRoot)).mount).toBe('/root/app');
    expect(() => resolveMount(input(session('/root'), asRoot))).toThrow(/home directory itself/);
  });
});

describe('assertMountCompatible', () => {
  it('refuses a different mount on an existing sandbox and says so', () => {
    const call = () => assertMountCompatible({ key: 'default', shared: true, existing: '/a', requested: '/b' });
    expect(call).toThrow(PolicyRefusedError);
    expect(call).toThrow(/shared sandbox "default" already has "\/a" mounted/);
    expect(() => assertMountCompatible({ key: 'default', shared: true, existing: null, requested: '/b' })).toThrow(
      /no workspace mount/,
    );
  });

  it('accepts the same mount or no request', () => {
    expect(() => assertMountCompatible({ key: 'default', shared: true, existing: '/a', requested: '/a' })).not.toThrow();
    expect(() => assertMountCompatible({ key: 'default', shared: true, existing: '/a', requested: null })).not.toThrow();
  });
});
