import { describe, expect, it } from 'vitest';
import { chooseShard, COUNT_TTL_MS, isTenantNetwork, networkName, RECOUNT_MARGIN, SHARD_CAPACITY, shardCapacity, ShardCounts } from '../../src/backends/docker/network-shards.js';

describe('tenant network shards', () => {
  const full = (shard: number) => ({ shard, members: SHARD_CAPACITY, capacity: SHARD_CAPACITY });

  it('stays below the 1,024 ports of a Linux bridge', () => {
    expect(SHARD_CAPACITY).toBeLessThan(1024);
  });

  it('a new sandbox joins the lowest shard with room; when all are full the next one is created', () => {
    expect(chooseShard([])).toBe(0);
    expect(chooseShard([{ shard: 0, members: 999, capacity: SHARD_CAPACITY }])).toBe(0);
    expect(chooseShard([full(0)])).toBe(1);
    expect(chooseShard([full(0), full(1), full(2)])).toBe(3);
    // A shard that emptied (its sandboxes went) is filled again before any higher one.
    expect(chooseShard([full(0), { shard: 1, members: 0, capacity: SHARD_CAPACITY }, { shard: 2, members: 5, capacity: SHARD_CAPACITY }])).toBe(1);
    // A reaped shard in the middle is created again rather than overfilling the others.
    expect(chooseShard([full(0), full(2)])).toBe(1);
    // Input order does not matter.
    expect(chooseShard([full(1), full(0)])).toBe(2);
  });

  it('a shard whose subnet is smaller holds fewer (addresses minus network, broadcast, gateway)', () => {
    expect(shardCapacity(['172.18.0.0/16'])).toBe(SHARD_CAPACITY);
    expect(shardCapacity(['192.168.16.0/20'])).toBe(SHARD_CAPACITY);
    expect(shardCapacity(['10.1.2.0/24'])).toBe(253);
    expect(shardCapacity(['10.1.2.0/30'])).toBe(1);
    expect(shardCapacity(['fd00::/64', '10.1.2.0/24'])).toBe(253);
    expect(shardCapacity([])).toBe(SHARD_CAPACITY);
    expect(chooseShard([{ shard: 0, members: 253, capacity: shardCapacity(['10.1.2.0/24']) }])).toBe(1);
  });

  it('names come from the installation and a digest of the tenant: fixed length, distinct per tenant and shard', () => {
    const a = networkName('inst-1', 'acme', 0);
    expect(a).toMatch(/^berth-net-[0-9a-f]{12}-[0-9a-f]{12}-0$/);
    expect(networkName('inst-1', 'acme', 1)).toBe(a.replace(/-0$/, '-1'));
    expect(networkName('inst-1', 'globex', 0)).not.toBe(a);
    expect(networkName('inst-2', 'acme', 0)).not.toBe(a);
    expect(networkName('inst-1', 'a'.repeat(200), 0)).toHaveLength(a.length);
  });

  it('recognises a tenant\'s shard networks and nothing else', () => {
    expect(isTenantNetwork('inst-1', 'acme', networkName('inst-1', 'acme', 0))).toBe(true);
    expect(isTenantNetwork('inst-1', 'acme', networkName('inst-1', 'acme', 17))).toBe(true);
    expect(isTenantNetwork('inst-1', 'acme', networkName('inst-1', 'globex', 0))).toBe(false);
    expect(isTenantNetwork('inst-1', 'acme', networkName('inst-2', 'acme', 0))).toBe(false);
    expect(isTenantNetwork('inst-1', 'acme', 'bridge')).toBe(false);
    expect(isTenantNetwork('inst-1', 'acme', `${networkName('inst-1', 'acme', 0)}x`)).toBe(false);
    expect(isTenantNetwork('inst-1', 'acme', networkName('inst-1', 'acme', 0).replace(/-0$/, '-01'))).toBe(false);
  });

  describe('member counts reused between creates (filling a tenant stays linear)', () => {
    const shard0 = { shard: 0, name: 'net-0', capacity: SHARD_CAPACITY };
    const shard1 = { shard: 1, name: 'net-1', capacity: SHARD_CAPACITY };

    it('asks the engine first, then chooses from its count plus the joins since, until the count is old', () => {
      const c = new ShardCounts();
      expect(c.choose([shard0], 0)).toBeUndefined();
      c.counted(new Map([['net-0', 10]]), 1_000);
      expect(c.choose([shard0], 1_000)).toBe(0);
      c.joined('net-0');
      expect(c.choose([shard0], 1_000 + COUNT_TTL_MS)).toBe(0);
      expect(c.choose([shard0], 1_001 + COUNT_TTL_MS)).toBeUndefined();
      expect(c.stale(1_001 + COUNT_TTL_MS)).toBe(true);
    });

    it('counts again before a sandbox joins a shard that is nearly full by the estimate; joins push it there', () => {
      const c = new ShardCounts();
      const edge = SHARD_CAPACITY - RECOUNT_MARGIN;
      c.counted(new Map([['net-0', edge - 2]]), 0);
      expect(c.choose([shard0], 0)).toBe(0);
      c.joined('net-0');
      expect(c.choose([shard0], 0)).toBe(0);
      c.joined('net-0');
      expect(c.choose([shard0], 0)).toBeUndefined();
      // A full shard by the count: the next shard is chosen (and created) without asking again.
      c.counted(new Map([['net-0', SHARD_CAPACITY]]), 0);
      expect(c.choose([shard0, shard1], 0)).toBe(1);
      expect(c.choose([shard0], 0)).toBe(1);
    });

    it('a small shard (a small subnet) is counted from the engine before every join', () => {
      const c = new ShardCounts();
      c.counted(new Map([['net-0', 0]]), 0);
      expect(c.choose([{ shard: 0, name: 'net-0', capacity: 13 }], 0)).toBeUndefined();
    });
  });
});
