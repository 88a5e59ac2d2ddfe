import { randomBytes } from 'node:crypto';
import { UsageError } from '../../errors.js';
import { serveMcpStdio } from '../../server/mcp/stdio.js';
import { COMMON_OPTIONS, parseFlags, SCOPE_HELP, SCOPE_OPTIONS, scopeFromFlags } from '../args.js';
import { Logger } from '../../logging/logger.js';
import { cliLog, type CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

const MCP_HELP = `usage: berth mcp [scope flags]

Serves the Model Context Protocol over stdio for one MCP client: tools terminal, process,
read_file, write_file and export_file, all in one berth session. Without --session each
connection gets its own session (mcp-<random>). The session is closed (its ephemeral sandbox
removed) when stdin closes or on SIGTERM/SIGINT. stdout carries only protocol messages; logs go
to stderr (BERTH_DEBUG=berth:mcp).

${SCOPE_HELP}`;

export async function mcpCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals, rest } = parseFlags('mcp', argv, { ...SCOPE_OPTIONS, ...COMMON_OPTIONS });
  if (values.help) {
    io.out(`${MCP_HELP}\n`);
    return 0;
  }
  if (positionals.length > 0 || rest !== undefined) {
    throw new UsageError('berth mcp takes only flags; the client sends commands through the terminal tool');
  }
  const scope = scopeFromFlags(values, io.env, io.cwd);
  scope.session ??= `mcp-${randomBytes(6).toString('hex')}`;
  const sink = cliLog(io, 'info');
  const log = sink ?? ((): void => undefined);
  // This process holds its session: if it dies, the next berth reaps the sandbox.
  const stop = new AbortController();
  const onSignal = (): void => stop.abort();
  try {
    return await withBroker(io, values.config, async (broker) => {
      process.once('SIGTERM', onSignal);
      process.once('SIGINT', onSignal);
      try {
        new Logger(sink, 'berth:mcp').info(`serving session ${scope.session} over stdio`);
        await serveMcpStdio(broker, scope, { signal: stop.signal, log });
        return 0;
      } finally {
        process.off('SIGTERM', onSignal);
        process.off('SIGINT', onSignal);
      }
    }, { serving: true, log });
  } finally {
    process.stdin.destroy();
  }
}
