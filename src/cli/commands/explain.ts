import type { Binding } from '../../broker/resolve-call.js';
import type { GuardStatus } from '../../egress/host-guard.js';
import { COMMON_OPTIONS, parseFlags, SCOPE_HELP, SCOPE_OPTIONS, scopeFromFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

const EXPLAIN_HELP = `usage: berth explain [scope flags] [--json]

Shows the binding for a call: backend and its isolation, how a timeout ends a command's processes
(kill: cgroup or tags), sandbox key, rule, mount, cwd and env names, and the egress policy: the
mode, what the network may reach, whether berth's proxy serves the sandbox, and each credential
with the hosts its value goes to (the sandbox holds only a placeholder); and its lifecycle: what
idleness does to it (an ephemeral one is removed, a persistent one hibernated) and whether it is
hibernated now; and whether the host guard keeps the sandbox from this host's services (docker:
its iptables rules read now; a missing rule is reported, berth's next sweep puts it back).
Pure policy otherwise: it contacts no engine and creates nothing (--parent registers its alias).

${SCOPE_HELP}
  --json              one single-line JSON object`;

export async function explainCommand(argv: string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('explain', argv, { ...SCOPE_OPTIONS, ...COMMON_OPTIONS, json: { type: 'boolean' } });
  if (values.help) {
    io.out(`${EXPLAIN_HELP}\n`);
    return 0;
  }
  return withBroker(io, values.config, async (broker) => {
    const scope = scopeFromFlags(values, io.env, io.cwd);
    const b = broker.explain(scope);
    const guard = await broker.hostGuard(scope);
    if (values.json) {
      io.out(`${JSON.stringify(guard === undefined ? b : { ...b, hostGuard: guard })}\n`);
    } else {
      const rows: [string, string][] = [
        ['backend', b.backend], ['isolation', b.isolation], ...(b.note === undefined ? [] : [['note', b.note] as [string, string]]), ...(b.host === undefined ? [] : [['host', b.host] as [string, string]]), ['kill', b.kill], ['tenant', b.tenant], ['profile', b.profile], ['sandboxKey', b.sandboxKey], ['rule', b.rule],
        ['persistent', String(b.persistent)], ['mount', b.mount ?? '(none)'], ['mountReason', b.mountReason], ['cwd', b.cwd],
        ['envNames', b.envNames.join(', ') || '(none)'], ['envMissing', b.envMissing.join(', ') || '(none)'],
      ];
      for (const [k, v] of [...rows, lifecycleRow(b.lifecycle), ...egressRows(b.egress), ...guardRows(guard)]) io.out(`${k.padEnd(12)} ${v}\n`);
    }
    return 0;
  });
}

/**
 * The egress lines of explain: the mode, the lists it uses, the proxy, and one line per credential
 * (`GITHUB_TOKEN -> api.github.com, github.com (placeholder)`).
 */
function egressRows(e: Binding['egress']): [string, string][] {
  const entry = (x: unknown): string => typeof x === 'string' ? x : Object.entries(x as Record<string, string>).map(([k, v]) => `${k}:${v}`).join(' ');
  return [
    ['egress', e.mode],
    ...(e.allow === undefined ? [] : [['egressAllow', e.allow.map(entry).join(', ')] as [string, string]]),
    ...(e.deny === undefined ? [] : [['egressDeny', e.deny.map(entry).join(', ')] as [string, string]]),
    ...(e.hosts === undefined ? [] : [['egressHosts', Object.entries(e.hosts).map(([n, ips]) => `${n}=${ips.join('|')}`).join(', ')] as [string, string]]),
    ['egressProxy', e.proxy ? 'yes' : 'no'],
    ...e.credentials.map((c): [string, string] => ['credential', `${c.name} -> ${c.hosts.join(', ')} (placeholder)`]),
  ];
}

/** The host guard line of explain, where a guard applies. */
function guardRows(g: GuardStatus | undefined): [string, string][] {
  if (g === undefined) return [];
  return [['hostGuard', g.enforced ? 'enforced: no host service or metadata address reachable' : `NOT enforced: ${g.reason ?? 'unknown'}`]];
}

/** The lifecycle line of explain: what idleness does to the sandbox, and whether it is hibernated now. */
function lifecycleRow(l: Binding['lifecycle']): [string, string] {
  const now = l.hibernatedMs === undefined ? '' : `; hibernated since ${new Date(l.hibernatedMs).toISOString()}, the next call resumes it`;
  if (l.whenIdle === 'never') return ['lifecycle', `kept running when idle (hibernateSeconds 0)${now}`];
  return ['lifecycle', `${l.whenIdle} after ${l.afterSeconds} s idle${now}`];
}
