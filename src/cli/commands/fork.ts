import { UsageError } from '../../errors.js';
import { COMMON_OPTIONS, parseFlags, SCOPE_HELP, SCOPE_OPTIONS, scopeFromFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

const FORK_HELP = `usage: berth fork [scope flags] --to-session S2 [--from NAME] [--json]

Makes session S2 whose sandbox starts from the call's sandbox as it is now (or from its snapshot
NAME), and whose shell starts in the source shell's cwd with its exported variables. The two
never see each other's later changes. A fork from the current state keeps a snapshot of it as the
new sandbox's base, removed once that sandbox goes (it counts against limits.snapshots meanwhile).
Refused when S2 resolves to the same sandbox as the source (a sandbox shared across sessions) or
already has one. A fork that fails changes nothing and says so.

${SCOPE_HELP}`;

export async function forkCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags('fork', argv, {
    ...SCOPE_OPTIONS, ...COMMON_OPTIONS, 'to-session': { type: 'string' }, from: { type: 'string' }, json: { type: 'boolean' },
  });
  if (values.help) {
    io.out(`${FORK_HELP}\n`);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`berth fork takes no words (got "${positionals[0]}"); name the snapshot with --from NAME`);
  const toSession = values['to-session'];
  if (toSession === undefined) throw new UsageError('berth fork needs --to-session S2: the new session the fork is for');
  return withBroker(io, values.config, async (broker) => {
    const r = await broker.snapshots.fork(scopeFromFlags(values, io.env, io.cwd), { toSession, from: values.from });
    io.out(values.json ? `${JSON.stringify(r)}\n`
      : `forked to session ${r.session} (sandbox ${r.sandboxKey}) from ${r.from === null ? 'the current state' : `snapshot ${r.from}`}${r.cwd === null ? '' : `; its shell starts in ${r.cwd}`}\n`);
    return 0;
  });
}
