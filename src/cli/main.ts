import { isBerthError } from '../errors.js';
import { exitCodeOf } from './exit-codes.js';
import { COMMANDS, isCommandName } from './commands/index.js';
import { KEEPER_COMMAND } from './keeper-start.js';
import { processIo, type CliIo } from './io.js';
import { SCOPE_HELP } from './args.js';
import { BERTH_VERSION } from '../kit/version.js';

const HELP = `berth: the right sandbox for every agent conversation

usage: berth <command> [flags]
       berth --version | --help

commands:
  exec [scope flags] [--workdir DIR] [--timeout S] [--json] -- CMD...   run a command
  explain [scope flags] [--json]     show the binding (sandbox key, mount, cwd, env names)
  ls [--tenant T | --all-tenants] [--json]   list sandboxes (of a tenant, or every tenant's)
  close [scope flags] [--json]       close a session (removes its ephemeral sandboxes)
  rm [scope flags]                   remove a sandbox, persistent or not
  snapshot create|ls|rm|restore [scope flags] [--name N] [--json] [NAME]
                                     save a sandbox (files and shell state), list, remove, or go back to one
  fork [scope flags] --to-session S2 [--from NAME] [--json]   a new session from this one's sandbox (or its snapshot)
  cp [scope flags] [--json] SRC DEST copy files in or out (sandbox side: sandbox:PATH)
  media [scope flags] [--json] PATH  print a host path for a file in the sandbox
  audit [--egress [--refused]] [--tenant T] [--user U] [--session S] [--limit N] [--json]
                                     show the audit log (or the egress decisions)
  top [--interval S] [--once] [--calls N] [--json]   live view: every sandbox's CPU, memory and processes, recent calls
  config check                       validate the config and print the effective one
  image build [--variant debian|minimal] [--image NAME] [--force]   build a sandbox image without a registry
  serve [--port N] [--host ADDR] [--grace S]   HTTP API (/v1), MCP (/mcp) and dashboard (/) for agent frameworks
  token create --tenant T [--profile P ...] [--name N]   a bearer token for berth serve (printed once, last line)
  token create --metrics [--name N]  a token that reads GET /metrics only
  token list [--json] | token revoke ID        tokens: id, name, tenant, profiles (never the token)
  mcp [scope flags]                  serve MCP over stdio (one session per connection)

${SCOPE_HELP}
every command but token takes --config FILE; every command takes --help (-h).

exit codes:
  0..255  exec: the command's own exit code
  1       a sandbox path that does not exist (cp, media)
  2       usage or config error: the message names the problem and the fix
  124     exec: the command timed out (its whole process tree is killed)
  125     berth could not run the call (refused, backend unavailable, missing image, limit reached)
  141     stdout was closed (berth exec ... | head -1)

Run "berth <command> --help" for details. State lives in $BERTH_HOME (default ~/.berth).`;

/** Runs the CLI; returns the exit code. Errors are one line on stderr that says what to do. */
export async function main(argv: string[], io: CliIo = processIo()): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    io.out(`${HELP}\n`);
    return name === undefined ? 2 : 0;
  }
  if (name === '--version' || name === '-V' || name === 'version') {
    io.out(`berth ${BERTH_VERSION}\n`);
    return 0;
  }
  if (name !== KEEPER_COMMAND && !isCommandName(name)) {
    io.err(`berth: unknown command "${name}"; run "berth --help" for the list\n`);
    return 2;
  }
  try {
    const run = name === KEEPER_COMMAND ? (await import('./commands/keep.js')).keepCommand : await COMMANDS[name]();
    return await run(rest, io);
  } catch (err) {
    if (isBerthError(err) && err.code !== 'internal') {
      io.err(`berth: ${oneLine(err.message)}\n`);
      return exitCodeOf(err.code);
    }
    io.err(`berth: internal error: ${oneLine(err instanceof Error ? err.message : String(err))}; ${BUG_REPORT}\n`);
    if (err instanceof Error && err.stack !== undefined && io.env['BERTH_DEBUG'] !== undefined) io.err(`${err.stack}\n`);
    return exitCodeOf('internal');
  }
}

/** What the CLI says after an error that is a bug in berth (code `internal`, or no berth error at all). */
const BUG_REPORT = 'this is a bug in berth, not in your command or config; please report it with the command you ran and the output of the same run with BERTH_DEBUG=*';

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, '; ');
}
