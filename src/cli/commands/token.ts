import { defaultBerthHome } from '../../config/load.js';
import { UsageError } from '../../errors.js';
import { assertTenant, TokenStore } from '../../server/tokens.js';
import { parseFlags } from '../args.js';
import type { CliIo } from '../io.js';

export const TOKEN_HELP = `usage: berth token create --tenant T [--profile P ...]
       berth token list [--json]
       berth token revoke ID

Bearer tokens for berth serve. A token is a tenant plus the profiles its requests may name
(--profile, repeatable; default: the default profile only); a request naming any other
profile gets 403. Tokens live in the state ($BERTH_HOME/state.db), which keeps only their
sha256, so a new token is printed once, as the last line of "create": store it then. A running
server sees new and revoked tokens on the next request.`;

export async function tokenCommand(argv: string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv;
  const { values, positionals } = parseFlags('token', rest, {
    tenant: { type: 'string' }, profile: { type: 'string', multiple: true }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
  });
  if (sub === undefined || sub === '--help' || sub === '-h' || values.help) {
    io.out(`${TOKEN_HELP}\n`);
    return sub === undefined ? 2 : 0;
  }
  if (sub !== 'create' && sub !== 'list' && sub !== 'revoke') {
    throw new UsageError(`unknown subcommand "berth token ${sub}"; use create, list or revoke`);
  }
  if (sub !== 'create' && (values.tenant !== undefined || values.profile !== undefined)) {
    throw new UsageError(`--tenant and --profile belong to "berth token create", not "berth token ${sub}"`);
  }
  const store = TokenStore.open(defaultBerthHome(io.env), { notice: (m) => io.err(`berth: ${m}\n`) });
  try {
    switch (sub) {
      case 'create': {
        if (positionals.length > 0) throw new UsageError(`berth token create takes no arguments, got "${positionals[0]}"`);
        const tenant = assertTenant(values.tenant);
        const { token, entry } = store.create(tenant, values.profile);
        const profiles = `profile${entry.profiles.length === 1 ? '' : 's'} ${entry.profiles.join(', ')}`;
        io.err(`berth: token ${entry.id} for tenant "${tenant}" (${profiles}) created; it is shown once (only its hash is kept in ${store.berthHome}/state.db)\n`);
        io.out(`${token}\n`);
        return 0;
      }
      case 'list': {
        const list = store.list().map(({ id, tenant, profiles, createdMs }) => ({ id, tenant, profiles, createdMs }));
        if (values.json) io.out(`${JSON.stringify(list)}\n`);
        else if (list.length === 0) io.out('no tokens\n');
        else for (const t of list) io.out(`${t.id}  ${t.tenant.padEnd(20)}  ${t.profiles.join(',').padEnd(20)}  ${new Date(t.createdMs).toISOString()}\n`);
        return 0;
      }
      case 'revoke': {
        const id = positionals[0];
        if (id === undefined || positionals.length > 1) throw new UsageError('berth token revoke takes one token id (tok_...), see "berth token list"');
        if (!store.revoke(id)) throw new UsageError(`no token ${JSON.stringify(id)}; see "berth token list"`);
        io.out(`revoked ${id}\n`);
        return 0;
      }
    }
  } finally {
    store.close();
  }
}
