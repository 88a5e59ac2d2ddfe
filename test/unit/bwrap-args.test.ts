import { describe, expect, it } from 'vitest';
import { bwrapArgs, type BwrapPlan } from '../../src/backends/bwrap/bwrap-args.js';

const plan: BwrapPlan = {
  binds: { workspace: '/r/sandboxes/s/workspace', home: '/r/sandboxes/s/home', run: '/r/sandboxes/s/run' },
  systemPaths: [
    { path: '/usr', kind: 'bind', source: '/usr' },
    { path: '/etc/resolv.conf', kind: 'bind', source: '/run/resolvconf/resolv.conf' },
    { path: '/bin', kind: 'symlink', target: 'usr/bin' },
  ],
  network: 'none',
  hostname: 'berth',
  tmpSizeBytes: 1024,
  fds: { info: 5, seccomp: 6, passwd: 7, group: 8, hosts: 9, nsswitch: 10 },
  command: ['/usr/bin/bash', '-c', 'script'],
};

/** The value after each occurrence of `flag`. */
function after(args: string[], flag: string): string[] {
  return args.flatMap((a, i) => (a === flag ? [args[i + 1]!] : []));
}

describe('bwrapArgs', () => {
  it('makes every namespace, drops every capability, forbids nested user namespaces and binds to berth', () => {
    const args = bwrapArgs(plan);
    for (const flag of ['--unshare-all', '--unshare-user', '--disable-userns', '--die-with-parent', '--new-session']) expect(args).toContain(flag);
    expect(args).not.toContain('--share-net');
    expect(after(args, '--cap-drop')).toEqual(['ALL']);
    expect(after(args, '--seccomp')).toEqual(['6']);
    expect(after(args, '--uid')).toEqual(['1000']);
  });

  it('shares the network only when asked', () => {
    expect(bwrapArgs({ ...plan, network: 'host' })).toContain('--share-net');
  });

  it('has no --seccomp only when no program is given (the explicit opt-out)', () => {
    expect(bwrapArgs({ ...plan, fds: { ...plan.fds, seccomp: undefined } })).not.toContain('--seccomp');
  });

  it('shows system paths read-only, the sandbox dirs at fixed places, and runs the command after --', () => {
    const args = bwrapArgs(plan);
    expect(after(args, '--ro-bind')).toEqual(['/usr', '/run/resolvconf/resolv.conf', '/r/sandboxes/s/run']);
    expect(args[args.indexOf('/run/resolvconf/resolv.conf') + 1]).toBe('/etc/resolv.conf');
    expect(after(args, '--ro-bind-data')).toEqual(['7', '8', '9', '10']);
    expect(after(args, '--bind')).toEqual(['/r/sandboxes/s/workspace', '/r/sandboxes/s/home']);
    expect(after(args, '--symlink')).toEqual(['usr/bin', '../tmp']);
    expect(args.slice(args.indexOf('--') + 1)).toEqual(plan.command);
    expect(after(args, '--size')).toEqual(['1024', '1024']);
    expect(after(args, '--tmpfs')).toEqual(['/dev/shm', '/tmp']);
    expect(after(args, '--remount-ro')).toEqual(['/dev', '/']);
    expect(args.indexOf('--remount-ro')).toBeGreaterThan(args.lastIndexOf('--bind'));
  });

  it('never carries an environment: no --setenv, no --clearenv games', () => {
    const args = bwrapArgs(plan);
    expect(args.filter((a) => a.startsWith('--setenv') || a.startsWith('--unsetenv'))).toEqual([]);
  });
});
