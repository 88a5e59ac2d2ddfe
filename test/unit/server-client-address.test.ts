import { describe, expect, it } from 'vitest';
import { clientKey } from '../../src/server/client-address.js';

/*
 * Which client a connection counts against for server.maxConnectionsPerAddress: one IPv6 client
 * holds a whole /64, so per address would be per connection for it; an IPv4 client reached
 * through a dual-stack socket must count as itself.
 */

describe('clientKey', () => {
  it.each([
    ['127.0.0.1', '127.0.0.1'],
    ['10.1.2.3', '10.1.2.3'],
    ['::ffff:127.0.0.2', '127.0.0.2'],
    ['::FFFF:10.1.2.3', '10.1.2.3'],
    ['2001:db8:1:2::1', '2001:db8:1:2::/64'],
    ['2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:db8:1:2::/64'],
    ['2001:0db8:0001:0002:0000:0000:0000:0001', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['64:ff9b::192.0.2.33', '64:ff9b:0:0::/64'],
    ['1:2:3:4:5:6:1.2.3.4', '1:2:3:4::/64'],
  ])('%s counts as %s', (address, key) => {
    expect(clientKey(address)).toBe(key);
  });

  it('every address of one /64 is one client; the next /64 is another', () => {
    const keys = new Set(['2001:db8:1:2::1', '2001:db8:1:2::2', '2001:db8:1:2:abcd::9', '2001:db8:1:2:0:0:0:ffff'].map(clientKey));
    expect(keys.size).toBe(1);
    expect(clientKey('2001:db8:1:3::1')).not.toBe(clientKey('2001:db8:1:2::1'));
  });

  it('a socket already gone (no address) is its own key', () => {
    expect(clientKey(undefined)).toBe('');
  });
});
