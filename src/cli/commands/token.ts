import { defaultBerthHome } from '../../setup/load-config.js';
import { UsageError } from '../../errors.js';
import { assertTenant, TokenStore, type TokenEntry } from '../../server/tokens.js';
import { parseFlags } from '../args.js';
import type { CliIo } from '../io.js';

const TOKEN_HELP = `usage: berth token create --tenant T [--profile P ...] [--name N]
       berth token create --metrics [--name N]
       berth token list [--json]
       berth token revoke ID

Bearer tokens for berth serve. A token is a tenant plus the profiles its requests may name
(--profile, repeatable; default: the default profile only); a request naming any other
profile gets 403. Tokens live in the state ($BERTH_HOME/state.db), which keeps only their
sha256, so a new token is printed once, as the last line of "create": store it then. A running
server sees new and revoked tokens on the next request.

A metrics token (--metrics) reads GET /metrics and nothing else: the counts of every tenant, for
Prometheus. No tenant token may read /metrics, and a metrics token runs nothing.

--name N names the token (1-64 letters, digits, '.', '_' or '-'; unique within its tenant): "token
list" shows it, and every audit entry of a call made with the token names it (berth audit).`;

export async function tokenCommand(argv: string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv;
  const { values, positionals } = parseFlags('token', rest, {
    tenant: { type: 'string' }, profile: { type: 'string', multiple: true }, metrics: { type: 'boolean' }, name: { type: 'string' }, json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  });
  if (sub === undefined || sub === '--help' || sub === '-h' || values.help) {
    io.out(`${TOKEN_HELP}\n`);
    return sub === undefined ? 2 : 0;
  }
  if (sub !== 'create' && sub !== 'list' && sub !== 'revoke') {
    throw new UsageError(`unknown subcommand "berth token ${sub}"; use create, list or revoke`);
  }
  if (sub !== 'create' && (values.tenant !== undefined || values.profile !== undefined || values.metrics !== undefined || values.name !== undefined)) {
    throw new UsageError(`--tenant, --profile, --metrics and --name belong to "berth token create", not "berth token ${sub}"`);
  }
  if (values.metrics === true && (values.tenant !== undefined || values.profile !== undefined)) {
    throw new UsageError('a metrics token has no tenant or profiles: use either --metrics or --tenant T [--profile P ...]');
  }
  const store = TokenStore.open(defaultBerthHome(io.env), { notice: (m) => io.err(`berth: ${m}\n`) });
  try {
    switch (sub) {
      case 'create': {
        if (positionals.length > 0) throw new UsageError(`berth token create takes no arguments, got "${positionals[0]}"`);
        if (values.metrics === true) {
          const { token, entry } = store.createMetrics({ name: values.name });
          io.err(`berth: metrics token ${labelOf(entry)} created (it reads GET /metrics only); it is shown once (only its hash is kept in ${store.berthHome}/state.db)\n`);
          io.out(`${token}\n`);
          return 0;
        }
        const tenant = assertTenant(values.tenant);
        const { token, entry } = store.create(tenant, values.profile, { name: values.name });
        const profiles = `profile${entry.profiles.length === 1 ? '' : 's'} ${entry.profiles.join(', ')}`;
        io.err(`berth: token ${labelOf(entry)} for tenant "${tenant}" (${profiles}) created; it is shown once (only its hash is kept in ${store.berthHome}/state.db)\n`);
        io.out(`${token}\n`);
        return 0;
      }
      case 'list': {
        const entries = store.list();
        const list = entries.map(({ id, name, tenant, profiles, createdMs, metrics }) =>
          ({ id, name: name ?? null, ...(metrics ? { metrics } : { tenant, profiles }), createdMs }));
        if (values.json) io.out(`${JSON.stringify(list)}\n`);
        else if (entries.length === 0) io.out('no tokens\n');
        else {
          io.out(`${'ID'.padEnd(16)}  ${'NAME'.padEnd(20)}  ${'TENANT'.padEnd(20)}  ${'PROFILES'.padEnd(20)}  CREATED\n`);
          for (const t of entries) {
            const who = t.metrics ? `${'(metrics)'.padEnd(20)}  ${'/metrics only'.padEnd(20)}` : `${t.tenant.padEnd(20)}  ${t.profiles.join(',').padEnd(20)}`;
            io.out(`${t.id.padEnd(16)}  ${(t.name ?? '-').padEnd(20)}  ${who}  ${new Date(t.createdMs).toISOString()}\n`);
          }
        }
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

/** `tok_0123456789ab "ci-bot"`: a token's id, and its name when it has one. */
function labelOf(entry: TokenEntry): string {
  return entry.name === undefined ? entry.id : `${entry.id} "${entry.name}"`;
}
