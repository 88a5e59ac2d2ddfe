import { describe, expect, it } from 'vitest';
import { formatRef, parseRef } from '../../src/backends/ssh/sandbox-ref.js';

const account = 'berth-0123456789abcdef01234567';

describe('ssh sandbox refs', () => {
  it('round-trips user, host, port, home root and account (IPv6 in brackets)', () => {
    for (const r of [
      { user: 'root', host: 'build1.example.com', port: 22, homeRoot: '/home/berth', account },
      { user: 'root', host: '::1', port: 2222, homeRoot: '/srv/sandboxes/berth', account },
    ]) {
      expect(parseRef(formatRef(r))).toEqual(r);
    }
    expect(formatRef({ user: 'root', host: '::1', port: 2222, homeRoot: '/home/berth', account })).toBe(`ssh://root@[::1]:2222/home/berth/${account}`);
  });

  it('refuses what formatRef never makes: another backend\'s ref, a path escape, a name berth never gives an account', () => {
    for (const ref of [
      '0123456789abcdef',
      '/home/ana/.berth/sandboxes/local/x',
      `ssh://root@h:22/home/berth/../../etc/${account}`,
      `ssh://root@h:22/${account}`,
      'ssh://root@h:22/home/berth/root',
      'ssh://root@h:22/home/berth/berth-0123',
      `ssh://root@h:0/home/berth/${account}`,
      `ssh://root@h:22/home/berth/${account}/`,
      `ssh://root@h:22/home/be rth/${account}`,
    ]) {
      expect(() => parseRef(ref), ref).toThrow(/is not an ssh sandbox ref/);
    }
  });
});
