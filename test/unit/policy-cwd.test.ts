import { describe, expect, it } from 'vitest';
import { mapWorkdir, resolveStartCwd, type StartCwdInput } from '../../src/policy/cwd.js';

const docker = (over: Partial<StartCwdInput>): string =>
  resolveStartCwd({
    recorded: undefined,
    backendName: 'docker',
    containerBackend: true,
    mount: '/home/ana/app',
    defaultCwd: '/workspace',
    ...over,
  });

const local = (over: Partial<StartCwdInput>): string =>
  resolveStartCwd({
    recorded: undefined,
    backendName: 'local',
    containerBackend: false,
    mount: null,
    defaultCwd: '/home/ana/app',
    ...over,
  });

describe('resolveStartCwd', () => {
  it('starts in the default when nothing is recorded', () => {
    expect(docker({})).toBe('/workspace');
    expect(local({})).toBe('/home/ana/app');
  });

  it('a recorded cwd beats the default', () => {
    expect(docker({ recorded: { path: '/tmp/build', backend: 'docker' } })).toBe('/tmp/build');
    expect(local({ recorded: { path: '/home/ana/app/src', backend: 'local' } })).toBe('/home/ana/app/src');
  });

  it('container: a host path under the mounted dir maps to /workspace', () => {
    expect(docker({ recorded: { path: '/home/ana/app/src/lib', backend: 'local' } })).toBe('/workspace/src/lib');
    expect(docker({ recorded: { path: '/home/ana/app', backend: 'local' } })).toBe('/workspace');
    expect(docker({ recorded: { path: '/home/ana/app/src/', backend: 'ssh' } })).toBe('/workspace/src');
    // Even when the record came from the container backend itself.
    expect(docker({ recorded: { path: '/home/ana/app/x', backend: 'docker' } })).toBe('/workspace/x');
  });

  it('container: any other host path is discarded, never cd /Users/... in a container', () => {
    expect(docker({ recorded: { path: '/Users/ana/other', backend: 'local' } })).toBe('/workspace');
    expect(docker({ recorded: { path: '/home/ana/application', backend: 'local' } })).toBe('/workspace');
    expect(docker({ mount: null, recorded: { path: '/home/ana/app/src', backend: 'local' } })).toBe('/workspace');
  });

  it('container: paths recorded by the same container backend are in-sandbox paths and kept', () => {
    expect(docker({ recorded: { path: '/workspace/src', backend: 'docker' } })).toBe('/workspace/src');
    expect(docker({ mount: null, recorded: { path: '/Users/ana', backend: 'docker' } })).toBe('/Users/ana');
  });

  it('non-container: only a path recorded by the same backend is kept', () => {
    expect(local({ recorded: { path: '/workspace/src', backend: 'docker' } })).toBe('/home/ana/app');
    expect(local({ recorded: { path: '/home/remote/x', backend: 'ssh' } })).toBe('/home/ana/app');
  });

  it('a relative or empty record is ignored', () => {
    expect(docker({ recorded: { path: 'src', backend: 'docker' } })).toBe('/workspace');
    expect(local({ recorded: { path: '', backend: 'local' } })).toBe('/home/ana/app');
  });
});

describe('mapWorkdir', () => {
  const mounted = { containerBackend: true, mount: '/home/ana/app' };
  it('maps a host path under the mount to /workspace', () => {
    expect(mapWorkdir('/home/ana/app/src', mounted)).toBe('/workspace/src');
    expect(mapWorkdir('/home/ana/app', mounted)).toBe('/workspace');
    expect(mapWorkdir('/home/ana/app/../app/src', mounted)).toBe('/workspace/src');
  });
  it('passes anything else on as given', () => {
    expect(mapWorkdir('/home/ana/apps', mounted)).toBe('/home/ana/apps');
    expect(mapWorkdir('/workspace/src', mounted)).toBe('/workspace/src');
    expect(mapWorkdir('src', mounted)).toBe('src');
    expect(mapWorkdir('/home/ana/app/src', { containerBackend: true, mount: null })).toBe('/home/ana/app/src');
    expect(mapWorkdir('/home/ana/app/src', { containerBackend: false, mount: '/home/ana/app' })).toBe(
      '/home/ana/app/src',
    );
  });
});
