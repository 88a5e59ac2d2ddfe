import { COMMON_OPTIONS, parseFlags, SCOPE_HELP, SCOPE_OPTIONS, scopeFromFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

const CLOSE_HELP = `usage: berth close [scope flags] [--json]

Closes a session: forgets its cwd records, subagent aliases and task overrides, and removes
the ephemeral sandboxes no other open session uses. Persistent sandboxes are kept. Closing a
task also closes the subagents registered under it (--parent), and theirs.

${SCOPE_HELP}`;

export async function closeCommand(argv: string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('close', argv, { ...SCOPE_OPTIONS, ...COMMON_OPTIONS, json: { type: 'boolean' } });
  if (values.help) {
    io.out(`${CLOSE_HELP}\n`);
    return 0;
  }
  return withBroker(io, values.config, async (broker) => {
    const r = await broker.closeSession(scopeFromFlags(values, io.env, io.cwd));
    if (values.json) io.out(`${JSON.stringify(r)}\n`);
    else if (!r.wasOpen && r.removed.length === 0 && r.kept.length === 0) io.out('no open session by that name: nothing to close\n');
    else io.out(`closed; removed: ${r.removed.join(', ') || '(none)'}; kept: ${r.kept.join(', ') || '(none)'}\n`);
    return 0;
  });
}
