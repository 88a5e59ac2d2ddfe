import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import type { KeptSandbox, StartedKeeper } from '../broker/egress-keeper.js';
import type { CliIo } from './io.js';

/** The keeper's command: internal, in neither the command map nor the help (main.ts runs it). */
export const KEEPER_COMMAND = '__keep';

/** The CLI's entry, which the keeper runs (`berth __keep`). */
const BERTH_BIN = fileURLToPath(new URL('../../bin/berth.js', import.meta.url));

/** How long a closing CLI call waits for its keeper to hold the sandboxes: past it, the keeper is ended and the call warns. */
const READY_WAIT_MS = 30_000;

/** The keeper's "ready" line: the keys it holds, and those whose passed listening socket it serves. */
const Ready = z.object({ held: z.array(z.string()), serving: z.array(z.string()) }).strict();

/** Where keepers write their warnings (a keeper has no terminal), in the berth home. */
export const KEEPER_LOG = 'keeper.log';

/**
 * Starts `berth __keep` for `sandboxes`, detached from this process and its terminal, with this
 * command's config, environment and cwd (so it serves the same egress context), and with the
 * listening sockets of those that name one (see PassedListener), and waits until it says it holds
 * them. Its warnings go to `$BERTH_HOME/keeper.log`. Resolves to its pid, the keys of the
 * sandboxes it holds and of those it serves on their passed socket; rejects naming why when it
 * did not get ready (it is then ended).
 */
export async function startKeeper(io: CliIo, configPath: string | undefined, berthHome: string, sandboxes: KeptSandbox[]): Promise<StartedKeeper> {
  const log = openSync(join(berthHome, KEEPER_LOG), 'a', 0o600);
  // Each passed listening socket is the keeper's descriptor 3, 4, ... (stdin, stdout and stderr first); the JSON names it by that number.
  const passed: number[] = [];
  const told = sandboxes.map((k) => (k.listener === undefined ? k : { ...k, listener: { ...k.listener, fd: 3 + passed.push(k.listener.fd) - 1 } }));
  let child;
  try {
    child = spawn(process.execPath, [BERTH_BIN, KEEPER_COMMAND, ...(configPath === undefined ? [] : ['--config', configPath])], {
      cwd: io.cwd, env: io.env, detached: true, stdio: ['pipe', 'pipe', log, ...passed],
    });
  } finally {
    closeSync(log);
  }
  const started = child;
  const stdout = started.stdout!;
  const stdin = started.stdin!;
  const ready = new Promise<StartedKeeper>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      started.kill('SIGTERM');
      reject(new Error(`it did not hold the sandboxes within ${READY_WAIT_MS / 1000} s; see ${join(berthHome, KEEPER_LOG)}`));
    }, READY_WAIT_MS);
    started.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    started.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`it exited (${code ?? 'signal'}) before it held the sandboxes; see ${join(berthHome, KEEPER_LOG)}`));
    });
    stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const line = /^ready (\{.*\})\n/m.exec(out);
      if (line !== null && started.pid !== undefined) {
        clearTimeout(timer);
        const said = Ready.safeParse((() => {
          try {
            return JSON.parse(line[1]!) as unknown;
          } catch {
            return undefined;
          }
        })());
        if (said.success) resolve({ pid: started.pid, ...said.data });
        else reject(new Error(`it answered "${line[0].trim()}", not the sandboxes it holds`));
      }
    });
  });
  stdin.on('error', () => undefined);
  stdin.end(JSON.stringify({ sandboxes: told }));
  try {
    return await ready;
  } finally {
    started.removeAllListeners('exit');
    stdout.destroy();
    started.unref();
  }
}
