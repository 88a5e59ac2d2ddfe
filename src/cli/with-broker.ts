import { Broker } from '../broker/broker.js';
import { cliLog, type CliIo, type CliLog } from './io.js';
import { startKeeper } from './keeper-start.js';

/** How a command's broker lives; the defaults are those of a one-shot command (`berth exec`). */
export interface CliBrokerOptions {
  /**
   * A serving process (`berth mcp`, `berth serve`) holds the sessions it opens, so they are reaped
   * if it dies, and keeps a command's full output in a spill file for its caller. A one-shot
   * command leaves its sessions open across invocations until `berth close` or idle expiry, and
   * streams output live: a spill file would only outlive the process.
   */
  serving?: boolean;
  /** The environment the broker reads once (default: the command's). */
  env?: NodeJS.ProcessEnv;
  /** Default: the lines BERTH_DEBUG asks for, on stderr. */
  log?: CliLog;
  /** How long in-flight calls may finish when the broker closes (default: the broker's). */
  closeGraceMs?: number;
  /** Run the orphan reaper (default true); an observer (`berth top`) changes nothing. */
  reap?: boolean;
  /**
   * Hand a background job that needs this process's egress proxy to a keeper process at close
   * (default true); the keeper's own broker hands nothing on.
   */
  keeper?: boolean;
}

/**
 * Opens the command's broker, runs `fn` with it and closes it, whatever `fn` does.
 *
 * @example
 * return withBroker(io, values.config, (broker) => { io.out(`${broker.list('local').length}\n`); return 0; });
 */
export async function withBroker<T>(
  io: CliIo, configPath: string | undefined, fn: (broker: Broker) => Promise<T> | T, opts: CliBrokerOptions = {},
): Promise<T> {
  const serving = opts.serving === true;
  let home = '';
  const broker = await Broker.open({
    configPath,
    cwd: io.cwd,
    env: opts.env ?? io.env,
    holdSessions: serving,
    spillOutput: serving,
    warmPool: serving,
    log: opts.log ?? cliLog(io),
    ...(opts.reap === undefined ? {} : { reap: opts.reap }),
    // A one-shot command's background job left in a sandbox whose egress proxy it served keeps it
    // through a keeper process (a serving process's sessions are its own, closed as it ends; the
    // keeper's own command never leaves a job).
    ...(serving || opts.keeper === false ? {} : { keeper: (kept) => startKeeper(io, configPath, home, kept) }),
  });
  home = broker.berthHome;
  try {
    return await fn(broker);
  } finally {
    await broker.close(opts.closeGraceMs === undefined ? {} : { graceMs: opts.closeGraceMs });
  }
}
