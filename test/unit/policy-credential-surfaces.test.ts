import { describe, expect, it } from 'vitest';
import { HOME_CREDENTIAL_DIRS, credentialSurfaceReason } from '../../src/policy/credential-surfaces.js';

const ctx = {
  homeDir: '/home/ana',
  stateDir: '/var/lib/berth',
  dockerSockets: ['/var/run/docker.sock', '/home/ana/.docker/run/docker.sock'],
};

describe('credentialSurfaceReason', () => {
  it.each([
    ['/', /filesystem root/],
    ['/home/ana', /home directory itself/],
    ['/home/ana/', /home directory itself/],
    ['/home', /contains the home directory/],
    ['/var/lib/berth', /berth's state dir/],
    ['/var/lib/berth/sandboxes/docker', /inside berth's state dir/],
    ['/var/lib', /contains berth's state dir/],
    ['/var/run', /contains a docker socket/],
    ['/var/run/docker.sock', /is a docker socket/],
    ['/home/ana/.ssh', /is ~\/.ssh/],
    ['/home/ana/.ssh/keys', /inside ~\/.ssh/],
    ['/home/ana/.SSH', /is ~\/.ssh/],
    ['/home/ana/.docker/run', /inside ~\/.docker/],
    ['relative/path', /not an absolute path/],
  ])('refuses %s', (p, reason) => {
    expect(credentialSurfaceReason(p, ctx)).toMatch(reason);
  });

  it.each(HOME_CREDENTIAL_DIRS)('refuses ~/%s, anything inside it and anything containing it', (dir) => {
    expect(credentialSurfaceReason(`/home/ana/${dir}`, ctx)).toBeDefined();
    expect(credentialSurfaceReason(`/home/ana/${dir}/sub`, ctx)).toBeDefined();
  });

  it.each([
    ['/etc', /^is \/etc, a system directory berth never exposes to a sandbox$/],
    ['/etc/cron.d', /^is inside \/etc, a system directory/],
    ['/usr', /is \/usr, a system directory/],
    ['/usr/local/bin', /inside \/usr, a system directory/],
    ['/boot', /is \/boot, a system directory/],
    ['/var/lib', /is \/var\/lib, a system directory/],
    ['/var/lib/docker', /inside \/var\/lib, a system directory/],
    ['/run', /is \/run, a system directory/],
    ['/run/docker', /inside \/run, a system directory/],
    ['/run/containerd', /inside \/run, a system directory/],
    ['/proc', /is \/proc, a system directory/],
    ['/proc/1/root', /inside \/proc/],
    ['/sys', /is \/sys, a system directory/],
    ['/dev', /is \/dev, a system directory/],
    ['/var/spool/cron', /inside \/var\/spool/],
    ['/var/log', /is \/var\/log/],
    ['/bin', /is \/bin/],
    ['/lib', /is \/lib/],
  ])('refuses the system directory %s, anything inside it', (p, reason) => {
    const r = credentialSurfaceReason(p, { homeDir: '/home/ana', stateDir: '/home/ana/.berth', dockerSockets: [] });
    expect(r).toMatch(reason);
  });

  it('refuses anything that contains a system directory', () => {
    const none = { homeDir: '/nonexistent-home', stateDir: '/nonexistent-home/.berth', dockerSockets: [] };
    expect(credentialSurfaceReason('/var', none)).toMatch(/^is \/var itself|contains \/var\/(run|lib)/);
  });

  it.each(['/home', '/var', '/opt', '/srv', '/mnt', '/media', '/tmp', '/var/tmp'])(
    'refuses the shared parent %s itself, but not a project inside it',
    (dir) => {
      const none = { homeDir: '/nonexistent-home', stateDir: '/nonexistent-home/.berth', dockerSockets: [] };
      expect(credentialSurfaceReason(dir, none)).toMatch(new RegExp(`^is ${dir.replace(/\//g, '\\/')} itself|contains`));
      expect(credentialSurfaceReason(`${dir}/project`, none)).toBeUndefined();
      expect(credentialSurfaceReason(`${dir}/project/src`, none)).toBeUndefined();
    },
  );

  it('names the kind of surface and the rule, never only the path', () => {
    expect(credentialSurfaceReason('/home/ana/.ssh/keys', ctx)).toBe(
      'is inside ~/.ssh (/home/ana/.ssh), a credential surface berth never exposes to a sandbox',
    );
    expect(credentialSurfaceReason('/tmp', ctx)).toBe(
      "is /tmp itself, a directory that holds other users' or services' files (a project inside it is fine)",
    );
  });

  it('catches a system directory by its real path (macOS: /etc -> /private/etc)', () => {
    const links: Record<string, string> = { '/etc': '/private/etc' };
    const none = { homeDir: '/home/ana', stateDir: '/home/ana/.berth', dockerSockets: [] };
    expect(credentialSurfaceReason('/private/etc/ssh', none)).toBeUndefined();
    expect(credentialSurfaceReason('/private/etc/ssh', { ...none, realpath: (p: string) => links[p] ?? p })).toBe(
      'is inside /etc (/private/etc), a system directory berth never exposes to a sandbox',
    );
  });

  it.each(['/home/ana/projects/app', '/home/ana/.sshx', '/home/anabel', '/srv/app', '/srv/berthx', '/var/runner', '/var/www/site', '/tmp/project', '/opt/tool', '/usrx', '/etcetera'])(
    'allows %s',
    (p) => {
      expect(credentialSurfaceReason(p, ctx)).toBeUndefined();
    },
  );

  it('checks the real path of each surface too (symlinked ~/.ssh, /var/run -> /run)', () => {
    const links: Record<string, string> = { '/home/ana/.ssh': '/data/keys', '/var/run/docker.sock': '/run/docker.sock' };
    const withReal = { ...ctx, realpath: (p: string) => links[p] ?? p };
    expect(credentialSurfaceReason('/data/keys/sub', ctx)).toBeUndefined();
    expect(credentialSurfaceReason('/data/keys/sub', withReal)).toMatch(/inside ~\/.ssh \(\/data\/keys\)/);
    expect(credentialSurfaceReason('/data', withReal)).toMatch(/contains ~\/.ssh/);
    expect(credentialSurfaceReason('/run', withReal)).toMatch(/contains a docker socket/);
  });

  it('a home of / still refuses its credential dirs and allows other dirs', () => {
    const rootHome = { homeDir: '/', stateDir: '/srv/berth', dockerSockets: [] };
    expect(credentialSurfaceReason('/.ssh', rootHome)).toMatch(/~\/.ssh/);
    expect(credentialSurfaceReason('/srv/app', rootHome)).toBeUndefined();
  });
});
