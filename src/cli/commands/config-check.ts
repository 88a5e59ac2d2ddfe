import { defaultBerthHome, findConfig } from '../../setup/load-config.js';
import { formatEffectiveConfig } from '../../setup/format-config.js';
import { parseConfig } from '../../setup/parse-config.js';
import { COMMON_OPTIONS, parseFlags } from '../args.js';
import type { CliIo } from '../io.js';

const CONFIG_HELP = `usage: berth config check [--config FILE]

Validates the config (--config FILE, else ./berth.yaml, else $BERTH_HOME/config.yaml) and
prints the effective config. Exit 2 with the problem and its fix when it is invalid.`;

export async function configCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags('config', argv, COMMON_OPTIONS);
  if (values.help || positionals[0] !== 'check') {
    io.out(`${CONFIG_HELP}\n`);
    return values.help ? 0 : 2;
  }
  const found = findConfig({ configFlag: values.config, cwd: io.cwd, berthHome: defaultBerthHome(io.env) });
  switch (found.kind) {
    case 'ok':
      io.out(formatEffectiveConfig(found.config));
      return 0;
    case 'missing':
      io.out(`# searched ${found.searched.join(', ')}\n${formatEffectiveConfig(parseConfig({}))}`);
      return 0;
    case 'invalid':
    case 'unreadable':
      throw found.error;
  }
}
