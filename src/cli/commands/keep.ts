import { fstatSync } from 'node:fs';
import { z } from 'zod';
import type { KeptSandbox } from '../../broker/egress-keeper.js';
import { UsageError } from '../../errors.js';
import { COMMON_OPTIONS, parseFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

const KEEP_HELP = `usage: berth __keep [--config FILE]   (internal: started by berth itself)

Keeps the sandboxes a berth command left with a background job (read as JSON on stdin): holds
each, so its egress proxy listens in this process and it is not hibernated, until no process a
command started runs in it any more; then lets it go as it is and exits. Prints "ready" and the
keys of those it holds and of those whose passed listening socket it serves (JSON) once it holds
them. Ends on SIGTERM or SIGINT, leaving the sandboxes as they are.`;

const Kept = z.object({
  sandboxes: z.array(z.object({
    scope: z.object({
      tenant: z.string(), profile: z.string(), session: z.string().optional(), task: z.string().optional(),
      parentTask: z.string().optional(), user: z.string().optional(),
      workspace: z.object({ path: z.string(), source: z.enum(['session', 'process']) }).strict().optional(),
    }).strict(),
    digest: z.string(), key: z.string(),
    // A listening socket passed as this process's descriptor `fd` (3 and up: after stdin, stdout and stderr).
    listener: z.object({ ref: z.string(), fd: z.number().int().min(3).max(1023), ns: z.string(), holder: z.string() }).strict().optional(),
  }).strict()),
}).strict();

/** Reads all of stdin. */
async function readStdin(): Promise<string> {
  let text = '';
  for await (const chunk of process.stdin) text += String(chunk);
  return text;
}

export async function keepCommand(argv: string[], io: CliIo, input: () => Promise<string> = readStdin): Promise<number> {
  const { values } = parseFlags('__keep', argv, { ...COMMON_OPTIONS });
  if (values.help) {
    io.out(`${KEEP_HELP}\n`);
    return 0;
  }
  let kept: KeptSandbox[];
  try {
    kept = Kept.parse(JSON.parse(await input())).sandboxes;
  } catch (err) {
    throw new UsageError(`__keep reads the sandboxes to keep as JSON on stdin, as berth writes it (${err instanceof Error ? err.message.split('\n')[0] : String(err)}); it is not meant to be run by hand`);
  }
  // Before the broker opens: a descriptor named but not passed could be one of this process's own
  // (node's are not sockets, the broker's would be), and one named twice would be closed twice.
  const named = new Set<number>();
  for (const k of kept) {
    if (k.listener === undefined) continue;
    if (named.has(k.listener.fd) || !isSocket(k.listener.fd)) {
      throw new UsageError(`__keep: descriptor ${k.listener.fd} named for sandbox ${k.key} is not a socket passed to this process${named.has(k.listener.fd) ? ' (named twice)' : ''}; it is not meant to be run by hand`);
    }
    named.add(k.listener.fd);
  }
  return withBroker(io, values.config, async (broker) => {
    const stop = (): void => void broker.close().catch(() => undefined);
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
    try {
      await broker.keepEgress(kept, (held, serving) => io.out(`ready ${JSON.stringify({ held, serving })}\n`));
    } finally {
      process.off('SIGTERM', stop);
      process.off('SIGINT', stop);
    }
    return 0;
  }, { reap: false, keeper: false });
}

function isSocket(fd: number): boolean {
  try {
    return fstatSync(fd).isSocket();
  } catch {
    return false;
  }
}
