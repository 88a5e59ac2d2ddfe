import { defaultBerthHome } from '../../config/load.js';
import { UsageError } from '../../errors.js';
import { assertTenant, TokenStore, tokensPath } from '../../server/tokens.js';
import { parseFlags } from '../args.js';
import type { CliIo } from '../io.js';

export const TOKEN_HELP = `usage: berth token create --tenant T
       berth token list [--json]
       berth token revoke ID

Bearer tokens for berth serve. Each token maps to one tenant; the tokens file
($BERTH_HOME/tokens.json) keeps only their sha256, so a new token is printed once, as the last
line of "create": store it then. A running server sees new and revoked tokens at once.`;

export async function tokenCommand(argv: string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv;
  const { values, positionals } = parseFlags('token', rest, {
    tenant: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
  });
  if (sub === undefined || sub === '--help' || sub === '-h' || values.help) {
    io.out(`${TOKEN_HELP}\n`);
    return sub === undefined ? 2 : 0;
  }
  const store = new TokenStore(tokensPath(defaultBerthHome(io.env)));
  switch (sub) {
    case 'create': {
      if (positionals.length > 0) throw new UsageError(`berth token create takes no arguments, got "${positionals[0]}"`);
      const tenant = assertTenant(values.tenant);
      const { token, entry } = store.create(tenant);
      io.err(`berth: token ${entry.id} for tenant "${tenant}" created; it is shown once (only its hash is kept in ${store.path})\n`);
      io.out(`${token}\n`);
      return 0;
    }
    case 'list': {
      const list = store.list().map(({ id, tenant, createdMs }) => ({ id, tenant, createdMs }));
      if (values.json) io.out(`${JSON.stringify(list)}\n`);
      else if (list.length === 0) io.out('no tokens\n');
      else for (const t of list) io.out(`${t.id}  ${t.tenant.padEnd(20)}  ${new Date(t.createdMs).toISOString()}\n`);
      return 0;
    }
    case 'revoke': {
      const id = positionals[0];
      if (id === undefined || positionals.length > 1) throw new UsageError('berth token revoke takes one token id (tok_...), see "berth token list"');
      if (!store.revoke(id)) throw new UsageError(`no token ${JSON.stringify(id)}; see "berth token list"`);
      io.out(`revoked ${id}\n`);
      return 0;
    }
    default:
      throw new UsageError(`unknown subcommand "berth token ${sub}"; use create, list or revoke`);
  }
}
