import { COMMON_OPTIONS, parseFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

export const LS_HELP = `usage: berth ls [--tenant T] [--json]

Lists the sandboxes of a tenant (default: local) as berth's state records them.`;

export async function lsCommand(argv: string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('ls', argv, { ...COMMON_OPTIONS, tenant: { type: 'string' }, json: { type: 'boolean' } });
  if (values.help) {
    io.out(`${LS_HELP}\n`);
    return 0;
  }
  return withBroker(io, values.config, (broker) => {
    const list = broker.list(values.tenant ?? 'local');
    if (values.json) {
      io.out(`${JSON.stringify(list)}\n`);
      return 0;
    }
    if (list.length === 0) {
      io.out('no sandboxes\n');
      return 0;
    }
    io.out(`${'KEY'.padEnd(32)} ${'BACKEND'.padEnd(7)} ${'LIFECYCLE'.padEnd(10)} ${'RULE'.padEnd(10)} SESSIONS\n`);
    for (const s of list) {
      const sessions = s.sessions.filter((x) => x.open).map((x) => x.session).join(',') || '-';
      io.out(`${s.sandboxKey.padEnd(32)} ${s.backend.padEnd(7)} ${(s.persistent ? 'persistent' : 'ephemeral').padEnd(10)} ${s.rule.padEnd(10)} ${sessions}\n`);
    }
    return 0;
  });
}
