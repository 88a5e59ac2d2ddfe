import { createHash } from 'node:crypto';

/*
 * Every docker network berth creates gets a bridge interface named with one fixed prefix, so the
 * host guard (docker-guard.ts) matches all of them, present and future, with one wildcard
 * (`-i bth+`) and never needs a rule per network. The name is derived from the network's name:
 * processes racing to create one network agree on it.
 */

/** The prefix of every berth bridge interface (iptables matches them as `bth+`). */
export const GUARDED_BRIDGE_PREFIX = 'bth';

/** The driver option that names a bridge network's interface. */
export const BRIDGE_NAME_OPTION = 'com.docker.network.bridge.name';

/**
 * The bridge interface of docker network `networkName`: the prefix and 12 hex digits of a digest,
 * 15 characters (the kernel's limit for an interface name).
 *
 * @example
 * guardedBridgeName('berth-net-3a2b…-9c8d…-0') // → 'bth5f0c2a9d41e7'
 */
export function guardedBridgeName(networkName: string): string {
  return GUARDED_BRIDGE_PREFIX + createHash('sha256').update(networkName).digest('hex').slice(0, 12);
}

/** A docker network as the engine lists it (only what this module reads). */
export interface ListedNetwork {
  Name: string;
  Driver?: string;
  Options?: Record<string, string> | null;
}

/**
 * The bridge networks among `networks` whose interface the guard does not match: made by an
 * older berth, or by hand, without the prefix (the engine then names it `br-<id>`). A sandbox on
 * one reaches the host. Pure: pass the engine's listing of berth's networks.
 */
export function unguardedNetworks(networks: readonly ListedNetwork[]): string[] {
  return networks
    .filter((n) => (n.Driver ?? 'bridge') === 'bridge' && !(n.Options?.[BRIDGE_NAME_OPTION] ?? '').startsWith(GUARDED_BRIDGE_PREFIX))
    .map((n) => n.Name);
}
