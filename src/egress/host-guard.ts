import { existsSync } from 'node:fs';
import { iptables, iptablesRestore, shown, type Family } from './iptables.js';

/*
 * Packet-filter rules berth installs on the host so that sandboxes reach no host service (see
 * docs/egress.md "Enforcement"). Every rule lives in a chain of berth's own, entered by one jump
 * from a built-in chain (or docker's DOCKER-USER) that selects the sandboxes' traffic. So
 * installing is idempotent (the chain is replaced whole, in one transaction; the jump is added
 * once), checking is a read, and removing touches nothing but berth's chains and jumps.
 */

/** One chain of berth's and the jump that sends a sandbox's packets into it. */
export interface GuardChain {
  family: Family;
  /** berth's chain (filter table). */
  name: string;
  /** Its rules, in order: each the argv that follows `-A <name>`. */
  rules: readonly (readonly string[])[];
  /** The chain the jump is inserted in, first. */
  from: string;
  /** What the jump matches (the argv before `-j <name>`). */
  match: readonly string[];
}

export interface HostGuard {
  /** What it guards, for messages ("docker sandboxes"). */
  what: string;
  chains: readonly GuardChain[];
}

/** Whether the guard holds; when it does not, why (shown at start-up and by `explain`). */
export interface GuardStatus {
  enforced: boolean;
  reason?: string;
}

export interface GuardCheck {
  ok: boolean;
  /** Each rule or jump not in place, as the command that would add it. */
  missing: string[];
}

/** The host has IPv6 (a kernel without it has no ip6tables tables to guard, and nothing to reach). */
function hasIpv6(): boolean {
  return existsSync('/proc/net/if_inet6');
}

function chainsHere(guard: HostGuard): GuardChain[] {
  const v6 = hasIpv6();
  return guard.chains.filter((c) => c.family === 'ipv4' || v6);
}

function jumpArgs(c: GuardChain): string[] {
  return [...c.match, '-j', c.name];
}

/** Why berth cannot install the guard here at all (not root), or undefined when it may try. */
function cannotInstall(guard: HostGuard): string | undefined {
  const uid = process.getuid?.();
  if (uid !== 0) return `berth runs as uid ${uid ?? 'unknown'}, not root: the host guard of ${guard.what} needs root to install its iptables rules; run berth as root`;
  return undefined;
}

/**
 * Installs `guard`: each chain replaced by its rules, and its jump inserted first in its `from`
 * chain unless it is there. Returns `enforced: false` with the reason when berth lacks the right
 * (not root, no iptables, a `from` chain missing); never throws.
 */
export async function installGuard(guard: HostGuard): Promise<GuardStatus> {
  const cannot = cannotInstall(guard);
  if (cannot !== undefined) return { enforced: false, reason: cannot };
  const chains = chainsHere(guard);
  for (const family of ['ipv4', 'ipv6'] as const) {
    const mine = chains.filter((c) => c.family === family);
    if (mine.length === 0) continue;
    const text = ['*filter', ...mine.map((c) => `:${c.name} - [0:0]`), ...mine.flatMap((c) => c.rules.map((r) => ['-A', c.name, ...r].join(' '))), 'COMMIT', ''].join('\n');
    const r = await iptablesRestore(family, text);
    if (!r.ok) return { enforced: false, reason: notInstalled(guard, `${family === 'ipv4' ? 'iptables' : 'ip6tables'}-restore failed: ${r.said}`, r.missing) };
  }
  for (const c of chains) {
    if ((await iptables(c.family, ['-C', c.from, ...jumpArgs(c)])).ok) continue;
    const r = await iptables(c.family, ['-I', c.from, '1', ...jumpArgs(c)]);
    if (!r.ok) return { enforced: false, reason: notInstalled(guard, `${shown(c.family, ['-I', c.from, '1', ...jumpArgs(c)])} failed: ${r.said}`, r.missing) };
  }
  return { enforced: true };
}

function notInstalled(guard: HostGuard, what: string, missing: boolean): string {
  const fix = missing ? 'install iptables (the nf_tables or legacy variant, with ip6tables)' : 'see the message above; berth needs root and a working iptables';
  return `the host guard of ${guard.what} is not installed: ${what}; ${fix}`;
}

/** Which of `guard`'s rules and jumps are not in place (a read: `iptables -C` for each). */
export async function checkGuard(guard: HostGuard): Promise<GuardCheck> {
  const missing: string[] = [];
  for (const c of chainsHere(guard)) {
    for (const rule of c.rules) {
      if (!(await iptables(c.family, ['-C', c.name, ...rule])).ok) missing.push(shown(c.family, ['-A', c.name, ...rule]));
    }
    if (!(await iptables(c.family, ['-C', c.from, ...jumpArgs(c)])).ok) missing.push(shown(c.family, ['-I', c.from, '1', ...jumpArgs(c)]));
  }
  return { ok: missing.length === 0, missing };
}

/**
 * The guard as it stands now; with `repair`, what is missing is put back first (a firewall reload
 * or `iptables -F INPUT` removes rules berth installed long ago). `restored` lists what was put
 * back, for the caller's warning; without `repair` a missing part is reported, not fixed.
 */
export async function keepGuard(guard: HostGuard, repair: boolean): Promise<GuardStatus & { restored: string[] }> {
  const cannot = cannotInstall(guard);
  if (cannot !== undefined) return { enforced: false, reason: cannot, restored: [] };
  const check = await checkGuard(guard);
  if (check.ok) return { enforced: true, restored: [] };
  if (!repair) return { enforced: false, reason: `the host guard of ${guard.what} is missing ${check.missing.length} of its rules (${check.missing.join('; ')}); berth puts them back at its next sweep or sandbox start`, restored: [] };
  const status = await installGuard(guard);
  return { ...status, restored: status.enforced ? check.missing : [] };
}

/**
 * Removes `guard`'s chains and every jump to them (also jumps with another match, such as an
 * earlier uid range). What is already gone is fine. Returns what could not be removed.
 */
export async function removeGuard(guard: HostGuard): Promise<string[]> {
  const left: string[] = [];
  for (const c of chainsHere(guard)) {
    const listed = await iptables(c.family, ['-S', c.from]);
    for (const line of listed.stdout.split('\n')) {
      const words = line.trim().split(/\s+/);
      const j = words.indexOf('-j');
      if (words[0] !== '-A' || j < 0 || words[j + 1] !== c.name || j + 2 !== words.length) continue;
      const r = await iptables(c.family, ['-D', ...words.slice(1)]);
      if (!r.ok) left.push(`${shown(c.family, ['-D', ...words.slice(1)])}: ${r.said}`);
    }
  }
  // Chains after jumps: a chain still referenced cannot be deleted.
  for (const c of chainsHere(guard)) {
    if (!(await iptables(c.family, ['-S', c.name])).ok) continue;
    await iptables(c.family, ['-F', c.name]);
    const r = await iptables(c.family, ['-X', c.name]);
    if (!r.ok) left.push(`${shown(c.family, ['-X', c.name])}: ${r.said}`);
  }
  return left;
}
