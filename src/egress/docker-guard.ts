import { GUARDED_BRIDGE_PREFIX } from './guarded-bridges.js';
import { checkGuard, installGuard, keepGuard, removeGuard, type GuardCheck, type GuardStatus, type HostGuard } from './host-guard.js';

/*
 * The host guard of docker sandboxes, in every egress mode: a sandbox reaches the internet (what
 * the engine forwards and masquerades) but no service of the host, whichever address it tries
 * (its own bridge's gateway, another berth bridge's, docker0's, the host's LAN addresses: all are
 * the host's own, so the packet is the host's INPUT), nor the link-local range with the cloud
 * metadata address (forwarded, so DOCKER-USER), nor a port another container publishes on the
 * host (DNAT, forwarded). Every berth bridge is named `bth…` (guarded-bridges.ts), so the rules
 * match all of them by wildcard, present and future. REJECT rather than DROP: a command in the
 * sandbox is told at once ("No route to host") instead of hanging until it times out.
 *
 * What is left open: replies to connections the host made (berth's own `docker exec` needs no
 * network at all), and on IPv6 the neighbour discovery a network with IPv6 needs to reach its
 * gateway at all.
 */

const BRIDGES = `${GUARDED_BRIDGE_PREFIX}+`;
const REPLIES = ['-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '-j', 'RETURN'];

export const DOCKER_GUARD: HostGuard = {
  what: 'docker sandboxes',
  chains: [
    {
      family: 'ipv4',
      name: 'BERTH-GUARD-INPUT',
      from: 'INPUT',
      match: ['-i', BRIDGES],
      rules: [REPLIES, ['-j', 'REJECT', '--reject-with', 'icmp-admin-prohibited']],
    },
    {
      family: 'ipv4',
      name: 'BERTH-GUARD-FORWARD',
      // dockerd keeps DOCKER-USER first in FORWARD and never edits what is in it.
      from: 'DOCKER-USER',
      match: ['-i', BRIDGES],
      rules: [
        ['-d', '169.254.0.0/16', '-j', 'REJECT', '--reject-with', 'icmp-admin-prohibited'],
        ['-m', 'conntrack', '--ctstate', 'DNAT', '--ctdir', 'ORIGINAL', '-j', 'REJECT', '--reject-with', 'icmp-admin-prohibited'],
      ],
    },
    {
      family: 'ipv6',
      name: 'BERTH-GUARD-INPUT',
      from: 'INPUT',
      match: ['-i', BRIDGES],
      rules: [
        REPLIES,
        ['-p', 'ipv6-icmp', '--icmpv6-type', 'neighbour-solicitation', '-j', 'RETURN'],
        ['-p', 'ipv6-icmp', '--icmpv6-type', 'neighbour-advertisement', '-j', 'RETURN'],
        ['-j', 'REJECT', '--reject-with', 'icmp6-adm-prohibited'],
      ],
    },
  ],
};

/**
 * Installs the docker host guard (idempotent). `enforced: false` says why it could not be (not
 * root, no iptables, dockerd's DOCKER-USER chain missing because dockerd runs with `iptables: false`
 * or is not up yet).
 *
 * @example
 * const status = await installDockerGuard();
 * if (!status.enforced) log.warn(status.reason);
 */
export function installDockerGuard(): Promise<GuardStatus> {
  return installGuard(DOCKER_GUARD);
}

/** Which docker guard rules are not in place (e.g. after someone flushed INPUT). */
export function checkDockerGuard(): Promise<GuardCheck> {
  return checkGuard(DOCKER_GUARD);
}

/** The docker guard now, put back first with `repair` (see `keepGuard`). */
export function keepDockerGuard(repair: boolean): Promise<GuardStatus & { restored: string[] }> {
  return keepGuard(DOCKER_GUARD, repair);
}

/** Removes the docker guard's chains and jumps; returns what could not be removed. */
export function removeDockerGuard(): Promise<string[]> {
  return removeGuard(DOCKER_GUARD);
}
