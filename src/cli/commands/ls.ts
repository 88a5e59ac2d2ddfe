import type { Broker } from '../../broker/broker.js';
import { UsageError } from '../../errors.js';
import { normalizeScope } from '../../scope/normalize.js';
import { COMMON_OPTIONS, parseFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { terminalText } from '../terminal-text.js';
import { withBroker } from '../with-broker.js';

const LS_HELP = `usage: berth ls [--tenant T | --all-tenants] [--json]

Lists the sandboxes of a tenant (default: local) as berth's state records them (LIFECYCLE:
ephemeral, persistent, or hibernated: a persistent one berth stopped when it went idle, which the
next call resumes). --all-tenants lists every tenant's, with a TENANT column: the operator's view
of this installation (it reads the state on this host; no token reaches it). When the config
keeps warm pools (warmPool.size), a last line counts the unclaimed pool sandboxes the engines hold
and the memory they use (not in --json).`;

export async function lsCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags('ls', argv, {
    ...COMMON_OPTIONS, tenant: { type: 'string' }, 'all-tenants': { type: 'boolean' }, json: { type: 'boolean' },
  });
  if (values.help) {
    io.out(`${LS_HELP}\n`);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`berth ls takes no arguments, got "${positionals[0]}" (see "berth ls --help")`);
  const all = values['all-tenants'] === true;
  if (all && values.tenant !== undefined) throw new UsageError('--tenant and --all-tenants contradict each other: give one of them');
  const tenant = normalizeScope({ tenant: values.tenant }).tenant;
  return withBroker(io, values.config, async (broker) => {
    const list = all ? broker.listAllTenants() : broker.list(tenant);
    if (values.json) {
      io.out(`${JSON.stringify(list)}\n`);
      return 0;
    }
    if (list.length === 0) {
      io.out('no sandboxes\n');
    } else {
      // Terminal-safe: a tenant, key or session id is the caller's text.
      const tenantCell = (t: string): string => (all ? `${terminalText(t).padEnd(20)} ` : '');
      io.out(`${tenantCell('TENANT')}${'KEY'.padEnd(32)} ${'BACKEND'.padEnd(7)} ${'LIFECYCLE'.padEnd(10)} ${'RULE'.padEnd(10)} SESSIONS\n`);
      for (const s of list) {
        const sessions = terminalText(s.sessions.filter((x) => x.open).map((x) => x.session).join(',') || '-');
        const lifecycle = s.hibernatedMs !== undefined ? 'hibernated' : s.persistent ? 'persistent' : 'ephemeral';
        io.out(`${tenantCell(s.tenant)}${terminalText(s.sandboxKey).padEnd(32)} ${s.backend.padEnd(7)} ${lifecycle.padEnd(10)} ${s.rule.padEnd(10)} ${sessions}\n`);
      }
    }
    if (keepsPools(broker)) io.out(`${await poolLine(broker)}\n`);
    return 0;
  });
}

function keepsPools(broker: Broker): boolean {
  return [broker.config.base, ...Object.values(broker.config.profiles)].some((s) => s.warmPool.size > 0);
}

/** `pool: 3 unclaimed sandboxes (docker), 12.4 MiB`: what the warm pools hold, across tenants (they carry none). */
async function poolLine(broker: Broker): Promise<string> {
  let pooled;
  try {
    pooled = await broker.pooledSandboxes();
  } catch (err) {
    return `pool: unknown (${(err as Error).message})`;
  }
  const engines = [...new Set(pooled.map((p) => p.backend))].join(', ');
  const measured = pooled.filter((p) => p.memoryBytes !== undefined);
  const mib = measured.reduce((n, p) => n + (p.memoryBytes ?? 0), 0) / 1024 / 1024;
  const memory = measured.length === 0 ? '' : `, ${mib.toFixed(1)} MiB${measured.length < pooled.length ? ` (${measured.length} measured)` : ''}`;
  return `pool: ${pooled.length} unclaimed sandbox${pooled.length === 1 ? '' : 'es'}${engines === '' ? '' : ` (${engines})`}${memory}`;
}
