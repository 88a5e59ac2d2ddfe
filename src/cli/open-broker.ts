import { Broker } from '../broker/broker.js';
import type { CliIo } from './io.js';

/** The CLI's broker: sessions stay open across invocations (detached) until `berth close`; no spill files. */
export function openCliBroker(io: CliIo, configPath: string | undefined): Promise<Broker> {
  const debug = io.env['BERTH_DEBUG'];
  return Broker.open({
    configPath,
    cwd: io.cwd,
    env: io.env,
    holdSessions: false,
    // exec streams every byte live; a spill file would only outlive the process (issue 8).
    spillOutput: false,
    log: debug ? (ns, msg) => { if (debug === '*' || ns.startsWith(debug)) io.err(`${ns} ${msg}\n`); } : undefined,
  });
}
