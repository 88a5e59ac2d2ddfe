import { UsageError } from '../../errors.js';
import { COMMON_OPTIONS, parseFlags, SCOPE_HELP, SCOPE_OPTIONS, scopeFromFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

const MEDIA_HELP = `usage: berth media [scope flags] [--json] PATH

Prints a host path a gateway can attach for PATH, a file inside the call's sandbox (what an
agent writes in a reply, e.g. /workspace/chart.png): a copy in the session's private staging dir
($BERTH_HOME/staging/..., removed by berth close). With files.mediaMode: live in the config, a
file the sandbox keeps in a host dir is given as that file itself (no copy; the agent can swap
it for a symlink after the check: see the README). The same refusals as berth cp apply.

${SCOPE_HELP}
  --json              print {"hostPath":...,"exported":...} on one line`;

export async function mediaCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags('media', argv, { ...SCOPE_OPTIONS, ...COMMON_OPTIONS, json: { type: 'boolean' } });
  if (values.help) {
    io.out(`${MEDIA_HELP}\n`);
    return 0;
  }
  if (positionals.length !== 1) throw new UsageError('berth media needs one PATH inside the sandbox, e.g. berth media --session s1 /workspace/chart.png');
  return withBroker(io, values.config, async (broker) => {
    const r = await broker.files.mediaPath(scopeFromFlags(values, io.env, io.cwd), positionals[0]!);
    io.out(values.json ? `${JSON.stringify(r)}\n` : `${r.hostPath}\n`);
    return 0;
  });
}
