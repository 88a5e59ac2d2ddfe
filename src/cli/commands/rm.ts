import { COMMON_OPTIONS, parseFlags, SCOPE_HELP, SCOPE_OPTIONS, scopeFromFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

const RM_HELP = `usage: berth rm [scope flags]

Removes the call's sandbox, persistent or not, with its files under $BERTH_HOME.

${SCOPE_HELP}`;

export async function rmCommand(argv: string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('rm', argv, { ...SCOPE_OPTIONS, ...COMMON_OPTIONS });
  if (values.help) {
    io.out(`${RM_HELP}\n`);
    return 0;
  }
  return withBroker(io, values.config, async (broker) => {
    const scope = scopeFromFlags(values, io.env, io.cwd);
    const key = broker.explain({ ...scope, workspace: undefined }).sandboxKey;
    const removed = await broker.removeSandboxOf({ ...scope, workspace: undefined });
    io.out(removed ? `removed sandbox ${key}\n` : `no sandbox ${key} to remove\n`);
    return 0;
  });
}
