import { createHash } from 'node:crypto';

/*
 * Sandboxes reach no other sandbox over the network (docs/design.md §8). Each tenant's sandboxes
 * join bridge networks that berth creates and labels for that tenant, with inter-container
 * traffic off (`enable_icc=false`): a bridge still forwards to the gateway (egress through IP
 * masquerade, as configured), but drops traffic between its own ports, and docker's isolation
 * chains drop traffic between bridges. So no sandbox reaches another, of its own tenant or of
 * another one. The tenant split is defence in depth (and keeps accounting per tenant).
 *
 * Shards. A Linux bridge holds at most 1,024 ports (BR_MAX_PORTS), one per attached container,
 * and its subnet may hold fewer addresses. So a tenant has shard networks 0, 1, 2, …: a new
 * sandbox joins the lowest-numbered shard with room, and when every shard is full the next one
 * is created. Members are counted from the engine (stopped containers too: they rejoin the bridge
 * when started) plus this process's creates in flight. Creates racing in other processes are not
 * counted; SHARD_CAPACITY stays below 1,024 to leave them room.
 */

/** Sandboxes per shard network, at most (fewer when its subnet is smaller). */
export const SHARD_CAPACITY = 1000;

/** Label on a berth network: its shard number within the tenant. */
export const SHARD_LABEL = 'berth.network-shard';

function hex12(s: string): string {
  return createHash('sha256').update(s).digest('hex').slice(0, 12);
}

/**
 * The name of shard `shard` of `tenant`'s network in `installation`: digests, so any tenant
 * string gives a valid, fixed-length name and two tenants never share one.
 *
 * @example
 * networkName('0f1e…', 'acme', 0) // → 'berth-net-3a2b…-9c8d…-0'
 */
export function networkName(installation: string, tenant: string, shard: number): string {
  return `berth-net-${hex12(installation)}-${hex12(tenant)}-${shard}`;
}

/** Whether `name` is one of `tenant`'s shard networks in `installation`. */
export function isTenantNetwork(installation: string, tenant: string, name: string): boolean {
  const prefix = `berth-net-${hex12(installation)}-${hex12(tenant)}-`;
  return name.startsWith(prefix) && /^(0|[1-9]\d*)$/.test(name.slice(prefix.length));
}

/**
 * How many sandboxes a shard with these IPAM subnets can hold: SHARD_CAPACITY, or fewer when
 * the first IPv4 subnet has fewer host addresses (minus network, broadcast and gateway).
 */
export function shardCapacity(subnets: readonly string[]): number {
  const v4 = subnets.map((s) => /^\d+\.\d+\.\d+\.\d+\/(\d+)$/.exec(s)).find((m) => m !== null);
  if (!v4) return SHARD_CAPACITY;
  const prefix = Number(v4[1]);
  const hosts = 2 ** (32 - prefix) - 3;
  return Math.max(1, Math.min(SHARD_CAPACITY, hosts));
}

/** What the engine says about one existing shard. */
export interface ShardState {
  shard: number;
  members: number;
  capacity: number;
}

/**
 * The shard a new sandbox joins: the lowest-numbered one with room; a shard that does not exist
 * yet has room (it is created). Pure.
 *
 * @example
 * chooseShard([{ shard: 0, members: 1000, capacity: 1000 }, { shard: 1, members: 3, capacity: 1000 }]) // → 1
 * chooseShard([{ shard: 0, members: 1000, capacity: 1000 }]) // → 1 (created)
 */
export function chooseShard(shards: readonly ShardState[]): number {
  const byShard = new Map(shards.map((s) => [s.shard, s]));
  for (let n = 0; ; n++) {
    const s = byShard.get(n);
    if (s === undefined || s.members < s.capacity) return n;
  }
}

/** How long a count of a tenant's shard members is reused (creates in between are added to it). */
export const COUNT_TTL_MS = 60_000;
/** A shard this close to full (by the estimate) is counted again from the engine before a sandbox joins it. */
export const RECOUNT_MARGIN = 100;

/**
 * How many sandboxes each shard of one tenant holds: the engine's count, plus the joins of this
 * process since. Counting lists every container of the tenant, which the engine builds in full
 * (with every network of each), so counting on each new sandbox made filling a tenant quadratic:
 * at 500 sandboxes the listing took longer than the create itself. So a count is reused for
 * COUNT_TTL_MS, and taken again sooner only when the shard it points at is within
 * RECOUNT_MARGIN of full. Joins are added and removals are not, so the estimate can only be too
 * high: it never sends a sandbox to a full bridge, it only makes the next count come sooner.
 *
 * @example
 * const counts = new ShardCounts();
 * counts.choose(shards, now) // undefined: count first
 * counts.counted(new Map([['berth-net-…-0', 12]]), now);
 * counts.choose(shards, now) // 0
 * counts.joined('berth-net-…-0');
 */
export class ShardCounts {
  private members: Map<string, number> | undefined;
  private countedAtMs = 0;

  /**
   * The shard a new sandbox joins by the estimate, or undefined when the engine must be asked
   * first (no count yet, the count is old, or the chosen shard is nearly full).
   */
  choose(shards: ReadonlyArray<{ shard: number; name: string; capacity: number }>, nowMs: number): number | undefined {
    if (this.members === undefined || nowMs - this.countedAtMs > COUNT_TTL_MS) return undefined;
    const members = this.members;
    const states = shards.map((s) => ({ shard: s.shard, capacity: s.capacity, members: members.get(s.name) ?? 0 }));
    const shard = chooseShard(states);
    const state = states.find((s) => s.shard === shard);
    if (state !== undefined && state.members >= state.capacity - RECOUNT_MARGIN) return undefined;
    return shard;
  }

  /** A fresh count from the engine (members by network name, creates in flight included). */
  counted(members: ReadonlyMap<string, number>, nowMs: number): void {
    this.members = new Map(members);
    this.countedAtMs = nowMs;
  }

  /** A sandbox is joining `name`: it counts as a member until the next count. */
  joined(name: string): void {
    this.members?.set(name, (this.members.get(name) ?? 0) + 1);
  }

  /** Whether this count is too old to be used (a map of tenants drops such entries). */
  stale(nowMs: number): boolean {
    return nowMs - this.countedAtMs > COUNT_TTL_MS;
  }
}
