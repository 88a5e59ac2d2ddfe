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

  it.each(['/home/ana/projects/app', '/home/ana/.sshx', '/home/anabel', '/srv/app', '/var/lib/berthx', '/var/runner'])(
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
