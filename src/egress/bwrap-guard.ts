import { GUARDED_BRIDGE_PREFIX } from './guarded-bridges.js';
import { installGuard, keepGuard, type GuardStatus, type HostGuard } from './host-guard.js';
import type { Family } from './iptables.js';

/*
 * The host guard of bwrap sandboxes on the host's network (`bwrap.network: host`). They share
 * the host's network namespace, so their packets are the host's OUTPUT; each sandbox runs as a
 * host uid of berth's range, so `-m owner --uid-owner FIRST-LAST` selects exactly theirs. Dropped:
 * every address of the host (`addrtype LOCAL`: loopback, every interface's address, present and
 * future, so every service the host and other sandboxes listen on), link-local (the metadata
 * address), and berth's docker bridges (docker sandboxes). REJECT, not DROP: a dropped TCP SYN
 * is retried until the connect times out, a rejected one fails at once ("No route to host").
 *
 * A host whose resolv.conf names a resolver on loopback (systemd-resolved's 127.0.0.53) gives
 * these sandboxes no DNS: that resolver is a host service like any other.
 */

function chain(family: Family, first: number, last: number, linkLocal: string) {
  const reject = ['-j', 'REJECT', '--reject-with', family === 'ipv4' ? 'icmp-admin-prohibited' : 'icmp6-adm-prohibited'];
  return {
    family,
    name: 'BERTH-GUARD-BWRAP',
    from: 'OUTPUT',
    match: ['-m', 'owner', '--uid-owner', `${first}-${last}`],
    rules: [
      ['-m', 'addrtype', '--dst-type', 'LOCAL', ...reject],
      ['-d', linkLocal, ...reject],
      ['-o', `${GUARDED_BRIDGE_PREFIX}+`, ...reject],
    ],
  };
}

/** The guard for sandboxes running as host uids `uids.first` .. `uids.first + uids.count - 1`. */
export function bwrapGuard(uids: { first: number; count: number }): HostGuard {
  const last = uids.first + uids.count - 1;
  return {
    what: 'bwrap sandboxes on the host network',
    chains: [chain('ipv4', uids.first, last, '169.254.0.0/16'), chain('ipv6', uids.first, last, 'fe80::/10')],
  };
}

/** Installs the bwrap host guard for `uids` (idempotent); `enforced: false` says why it could not be. */
export function installBwrapGuard(uids: { first: number; count: number }): Promise<GuardStatus> {
  return installGuard(bwrapGuard(uids));
}

/** The bwrap guard for `uids` now, put back first with `repair` (see `keepGuard`). */
export function keepBwrapGuard(uids: { first: number; count: number }, repair: boolean): Promise<GuardStatus & { restored: string[] }> {
  return keepGuard(bwrapGuard(uids), repair);
}
