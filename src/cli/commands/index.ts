import type { CliIo } from '../io.js';

/** Runs one command with the words after its name; resolves to the exit code. */
export type CommandRun = (argv: string[], io: CliIo) => Promise<number>;

/**
 * Every command, each loaded only when it runs: `berth --help` reads no command module, and
 * `berth explain` loads neither the HTTP server nor the MCP SDK.
 */
export const COMMANDS = {
  exec: () => import('./exec.js').then((m) => m.execCommand),
  explain: () => import('./explain.js').then((m) => m.explainCommand),
  ls: () => import('./ls.js').then((m) => m.lsCommand),
  close: () => import('./close.js').then((m) => m.closeCommand),
  rm: () => import('./rm.js').then((m) => m.rmCommand),
  snapshot: () => import('./snapshot.js').then((m) => m.snapshotCommand),
  fork: () => import('./fork.js').then((m) => m.forkCommand),
  config: () => import('./config-check.js').then((m) => m.configCommand),
  image: () => import('./image.js').then((m) => m.imageCommand),
  cp: () => import('./cp.js').then((m) => m.cpCommand),
  media: () => import('./media.js').then((m) => m.mediaCommand),
  audit: () => import('./audit.js').then((m) => m.auditCommand),
  top: () => import('./top.js').then((m) => m.topCommand),
  serve: () => import('./serve.js').then((m) => m.serveCommand),
  token: () => import('./token.js').then((m) => m.tokenCommand),
  mcp: () => import('./mcp.js').then((m) => m.mcpCommand),
} as const satisfies Record<string, () => Promise<CommandRun>>;

export type CommandName = keyof typeof COMMANDS;

/** Own names only: "constructor" or "toString" is no command. */
export function isCommandName(name: string): name is CommandName {
  return Object.hasOwn(COMMANDS, name);
}
