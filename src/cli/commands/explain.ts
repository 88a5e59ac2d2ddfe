import { COMMON_OPTIONS, parseFlags, SCOPE_HELP, SCOPE_OPTIONS, scopeFromFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

export const EXPLAIN_HELP = `usage: berth explain [scope flags] [--json]

Shows the binding for a call: backend and its isolation, how a timeout ends a command's processes
(kill: cgroup or tags), sandbox key, rule, mount, cwd and env names.
Pure policy: it contacts no engine and creates nothing (--parent registers its alias).

${SCOPE_HELP}
  --json              one single-line JSON object`;

export async function explainCommand(argv: string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('explain', argv, { ...SCOPE_OPTIONS, ...COMMON_OPTIONS, json: { type: 'boolean' } });
  if (values.help) {
    io.out(`${EXPLAIN_HELP}\n`);
    return 0;
  }
  return withBroker(io, values.config, (broker) => {
    const b = broker.explain(scopeFromFlags(values, io.env, io.cwd));
    if (values.json) {
      io.out(`${JSON.stringify(b)}\n`);
    } else {
      const rows: [string, string][] = [
        ['backend', b.backend], ['isolation', b.isolation], ...(b.note === undefined ? [] : [['note', b.note] as [string, string]]), ...(b.host === undefined ? [] : [['host', b.host] as [string, string]]), ['kill', b.kill], ['tenant', b.tenant], ['profile', b.profile], ['sandboxKey', b.sandboxKey], ['rule', b.rule],
        ['persistent', String(b.persistent)], ['mount', b.mount ?? '(none)'], ['mountReason', b.mountReason], ['cwd', b.cwd],
        ['envNames', b.envNames.join(', ') || '(none)'], ['envMissing', b.envMissing.join(', ') || '(none)'],
      ];
      for (const [k, v] of rows) io.out(`${k.padEnd(12)} ${v}\n`);
    }
    return 0;
  });
}
