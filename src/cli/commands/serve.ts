import { BerthError, UsageError } from '../../errors.js';
import { BerthServer } from '../../server/server.js';
import { ServerMetrics } from '../../server/metrics.js';
import { assertHostExposureAllowed, hostExposureWarnings } from '../../server/caller.js';
import { TokenStore } from '../../server/tokens.js';
import { COMMON_OPTIONS, parseFlags } from '../args.js';
import { cliLog, type CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

const SERVE_HELP = `usage: berth serve [--port N] [--host ADDR] [--grace SECONDS] [--config FILE]

Serves the HTTP API (/v1, described at /v1/openapi.json), MCP over streamable HTTP (/mcp) and
the dashboard (/) for agent frameworks in any language. Every request needs a bearer token
(berth token create --tenant T [--profile P]); the token decides the tenant and the profiles a
request may name.

  --port N          port to listen on (default 7878; 0 picks a free one)
  --host ADDR       address to bind (default 127.0.0.1, loopback only). Tokens travel in clear
                    text: put a TLS proxy in front before binding anything but loopback
  --grace SECONDS   on SIGTERM/SIGINT, how long in-flight calls may finish (default 10)
  --config FILE     config file (default: ./berth.yaml, then $BERTH_HOME/config.yaml)

A profile that runs on the host (backend local: no isolation, berth's own user) is refused at
start-up while any token may use it, unless the config sets server.allowHostBackend: true (then
berth says so loudly at start-up, and explain says isolation "none").

At start-up the orphan reaper removes what a crashed server left (ephemeral sandboxes of dead
sessions); persistent sandboxes are reattached on first use. On SIGTERM the server stops
accepting, lets in-flight calls finish, removes the ephemeral sandboxes of its sessions, keeps
persistent ones and exits 0.`;

export async function serveCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags('serve', argv, {
    ...COMMON_OPTIONS, port: { type: 'string' }, host: { type: 'string' }, grace: { type: 'string' },
  });
  if (values.help) {
    io.out(`${SERVE_HELP}\n`);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`berth serve takes no arguments, got "${positionals[0]}"`);
  const port = values.port === undefined ? 7878 : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new UsageError(`--port "${values.port}" is not a port number (0-65535)`);
  const graceSeconds = values.grace === undefined ? 10 : Number(values.grace);
  if (!Number.isFinite(graceSeconds) || graceSeconds < 0 || graceSeconds > 3600) {
    throw new UsageError(`--grace "${values.grace}" is not a number of seconds between 0 and 3600`);
  }
  const host = values.host ?? '127.0.0.1';
  const log = cliLog(io, 'info');
  // The server's routing comes only from requests: BERTH_SESSION (a CLI convenience) must not
  // become the session of every request that names none.
  const { BERTH_SESSION: _ignored, ...env } = io.env;
  const graceMs = graceSeconds * 1000;
  const code = await withBroker(io, values.config, async (broker) => {
    let tokens: TokenStore | undefined;
    let server: BerthServer | undefined;
    let stopObserving = (): void => undefined;
    const stopped = new Promise<string>((resolve) => {
      process.once('SIGTERM', () => resolve('SIGTERM'));
      process.once('SIGINT', () => resolve('SIGINT'));
    });
    try {
      tokens = TokenStore.sharing(broker, { notice: (m) => io.err(`berth: ${m}\n`) });
      // Refused before anything else happens; an accepted exposure is said loudly.
      for (const line of hostExposureWarnings(assertHostExposureAllowed(broker.config, tokens.list()))) io.err(`berth: ${line}\n`);
      // Observing before the start-up pass below, so /metrics counts what it removes.
      const metrics = new ServerMetrics(broker);
      stopObserving = broker.observe(metrics);
      // What a crashed server left: ephemeral sandboxes of sessions whose owner is dead.
      const reaped = await broker.reapers.reapOrphans();
      if (reaped.length > 0) io.err(`berth: removed ${reaped.length} orphaned sandbox(es) left by an earlier run\n`);
      if (tokens.list().length === 0) io.err('berth: no tokens yet; every request will get 401. Create one: berth token create --tenant T\n');
      try {
        server = await BerthServer.start({ broker, tokens, host, port, log, metrics });
      } catch (err) {
        if (err instanceof BerthError) throw err;
        throw new BerthError('listen_failed', `cannot listen on ${host}:${port}: ${(err as Error).message}; pick another --port or --host`);
      }
      if (!isLoopback(host)) io.err(`berth: listening on ${host}, not loopback: tokens travel in clear text unless a TLS proxy is in front\n`);
      io.out(`berth: listening on ${server.url} (dashboard /, API /v1, MCP /mcp)\n`);
      const signal = await stopped;
      io.err(`berth: ${signal}: finishing in-flight calls (up to ${graceSeconds} s), then removing ephemeral sandboxes\n`);
      return 0;
    } finally {
      await server?.close({ graceMs });
      stopObserving();
      tokens?.close();
    }
  }, { serving: true, env, log, closeGraceMs: graceMs });
  // Only a server that ran gets here (a refusal before listening is its own one-line error).
  io.err('berth: stopped\n');
  return code;
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host.startsWith('127.');
}
