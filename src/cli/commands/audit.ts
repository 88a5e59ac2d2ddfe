import type { EgressAuditEntry } from '../../broker/broker.js';
import { UsageError } from '../../errors.js';
import { normalizeScope } from '../../scope/normalize.js';
import { parseUserRef } from '../../scope/user-ref.js';
import { COMMON_OPTIONS, parseFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { terminalText } from '../terminal-text.js';
import { withBroker } from '../with-broker.js';

const AUDIT_HELP = `usage: berth audit [--egress [--refused]] [--tenant T] [--user PLATFORM:ID] [--session S] [--limit N] [--json]

Prints the audit log of one tenant (default: local), newest first: every exec, background job,
upload, export, read, media lookup, job kill (KIND kill: the job and what came of it), snapshot
action and close, with granted secret values redacted from the command text. TOKEN names the
bearer token a remote call came with (its --name, else its id; - for a local call).
With --egress, the decisions of berth's egress proxy instead: host and port, allowed or refused,
the rule that decided, bytes up and down, the credentials put in (names only, never a value).

  --egress            the egress proxy's decisions instead of the calls
  --refused           with --egress: only refused requests
  --tenant T          tenant (default: local); entries of other tenants are never shown
  --user PLATFORM:ID  only this end user's calls
  --session S         only this session's calls
  --limit N           at most N entries (default 100, at most 10000)
  --json              print one single-line JSON array`;

export async function auditCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags('audit', argv, {
    ...COMMON_OPTIONS, tenant: { type: 'string' }, user: { type: 'string' }, session: { type: 'string' },
    limit: { type: 'string' }, json: { type: 'boolean' }, egress: { type: 'boolean' }, refused: { type: 'boolean' },
  });
  if (values.help) {
    io.out(`${AUDIT_HELP}\n`);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`berth audit takes no arguments, got "${positionals[0]}" (see "berth audit --help")`);
  const { tenant } = normalizeScope({ tenant: values.tenant });
  if (values.user !== undefined) parseUserRef(values.user);
  let limit = 100;
  if (values.limit !== undefined) {
    limit = Number(values.limit);
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw new UsageError(`--limit "${values.limit}" is not a whole number between 1 and 10000`);
  }
  if (values.refused && !values.egress) throw new UsageError('--refused is a filter of --egress; run "berth audit --egress --refused"');
  if (values.egress) {
    const filter = { tenant, user: values.user, session: values.session, limit, ...(values.refused ? { allowed: false } : {}) };
    return withBroker(io, values.config, (broker) => printEgress(io, broker.egressAudit(filter), values.json === true));
  }
  return withBroker(io, values.config, (broker) => {
    const entries = broker.audit({ tenant, user: values.user, session: values.session, limit });
    if (values.json) {
      io.out(`${JSON.stringify(entries)}\n`);
      return 0;
    }
    if (entries.length === 0) {
      io.out('no audit entries\n');
      return 0;
    }
    io.out(`${'TIME'.padEnd(24)} ${'KIND'.padEnd(6)} ${'USER'.padEnd(20)} ${'SESSION'.padEnd(16)} ${'SANDBOX'.padEnd(24)} ${'EXIT'.padStart(4)} ${'MS'.padStart(6)} ${'TOKEN'.padEnd(16)} COMMAND\n`);
    for (const e of entries) {
      const command = terminalText(e.command ?? '');
      // TOKEN: the name of the token a remote call came with, else its id; `-` for a local call.
      const [user, session, key, token] = [e.user, e.session, e.sandboxKey, e.tokenName ?? e.tokenId].map((v) => terminalText(v ?? '-')) as [string, string, string, string];
      io.out(`${new Date(e.timeMs).toISOString().padEnd(24)} ${e.kind.padEnd(6)} ${user.padEnd(20)} ${session.padEnd(16)} ${key.padEnd(24)} ${String(e.exitCode ?? '-').padStart(4)} ${String(e.durationMs ?? '-').padStart(6)} ${token.padEnd(16)} ${command}\n`);
    }
    return 0;
  });
}

function printEgress(io: CliIo, entries: EgressAuditEntry[], json: boolean): number {
  if (json) {
    io.out(`${JSON.stringify(entries)}\n`);
    return 0;
  }
  if (entries.length === 0) {
    io.out('no egress decisions\n');
    return 0;
  }
  io.out(`${'TIME'.padEnd(24)} ${'DECISION'.padEnd(8)} ${'SESSION'.padEnd(16)} ${'USER'.padEnd(20)} ${'TARGET'.padEnd(32)} ${'CHANNEL'.padEnd(11)} ${'UP'.padStart(8)} ${'DOWN'.padStart(8)} RULE\n`);
  for (const e of entries) {
    const [session, user, target, rule] = [e.session ?? '-', e.user ?? '-', `${e.host}:${e.port}`, e.rule].map(terminalText) as [string, string, string, string];
    const extra = [
      ...(e.detail === null ? [] : [`(${terminalText(e.detail)})`]),
      ...(e.credentials.length === 0 ? [] : [`credentials: ${e.credentials.join(', ')}`]),
      ...(e.status === null ? [] : [`status ${e.status}`]),
    ].join(' ');
    io.out(`${new Date(e.timeMs).toISOString().padEnd(24)} ${(e.allowed ? 'allowed' : 'refused').padEnd(8)} ${session.padEnd(16)} ${user.padEnd(20)} ${target.padEnd(32)} ${e.channel.padEnd(11)} ${String(e.bytesUp).padStart(8)} ${String(e.bytesDown).padStart(8)} ${rule}${extra === '' ? '' : ` ${extra}`}\n`);
  }
  return 0;
}
