import { setTimeout as sleep } from 'node:timers/promises';
import { UsageError } from '../../errors.js';
import { COMMON_OPTIONS, parseFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { renderFrame, topRows, usageByRow } from '../top/render.js';
import { withBroker } from '../with-broker.js';

export const TOP_HELP = `usage: berth top [--interval S] [--once] [--calls N] [--json]

The operator's live view of this installation, on this host: every tenant's sandboxes with their
state and the CPU, memory and processes their engine counts (busiest first), and the latest calls
of every tenant. On a terminal it redraws in place every --interval seconds until Ctrl-C (over SSH
too); otherwise, or with --once, it prints one frame and exits. CPU use needs two samples, so the
first frame comes after one second. It only reads: nothing is started, stopped or reaped.

  --interval S  seconds between frames on a terminal (default 2, at least 0.5)
  --once        one frame, then exit
  --calls N     recent calls shown (default 10, at most 100)
  --json        the view as one JSON object (implies --once)`;

/** Cursor home + clear screen; hide and show the cursor while redrawing. */
const CLEAR = '\x1b[H\x1b[2J';
const HIDE_CURSOR = '\x1b[?25l';
const SHOW_CURSOR = '\x1b[?25h';

export async function topCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags('top', argv, {
    ...COMMON_OPTIONS, interval: { type: 'string' }, once: { type: 'boolean' }, calls: { type: 'string' }, json: { type: 'boolean' },
  });
  if (values.help) {
    io.out(`${TOP_HELP}\n`);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`berth top takes no arguments, got "${positionals[0]}" (see "berth top --help")`);
  const intervalSeconds = values.interval === undefined ? 2 : Number(values.interval);
  if (!Number.isFinite(intervalSeconds) || intervalSeconds < 0.5 || intervalSeconds > 3600) {
    throw new UsageError(`--interval "${values.interval}" is not a number of seconds between 0.5 and 3600`);
  }
  const calls = values.calls === undefined ? 10 : Number(values.calls);
  if (!Number.isInteger(calls) || calls < 0 || calls > 100) throw new UsageError(`--calls "${values.calls}" is not a whole number between 0 and 100`);
  const live = io.terminal !== undefined && values.once !== true && values.json !== true;

  return withBroker(io, values.config, async (broker) => {
    const stop = new AbortController();
    const quit = (): void => stop.abort();
    process.once('SIGINT', quit);
    process.once('SIGTERM', quit);
    io.outClosed?.addEventListener('abort', quit);
    if (live) io.out(HIDE_CURSOR);
    try {
      let sampledMs = Date.now();
      let previous = usageByRow(await broker.overview({ recentCalls: calls }));
      for (let first = true; ; first = false) {
        // The engine's stats answer on its own one-second tick: the wait counts from the last ask.
        const gapMs = first || !live ? 1_000 : intervalSeconds * 1_000;
        const waited = await sleep(Math.max(0, sampledMs + gapMs - Date.now()), true, { signal: stop.signal }).catch(() => false);
        if (!waited) return 0;
        sampledMs = Date.now();
        const view = await broker.overview({ recentCalls: calls });
        const nowMs = Date.now();
        if (values.json === true) {
          io.out(`${JSON.stringify({ timeMs: nowMs, sandboxes: topRows(view, previous, nowMs), recentCalls: view.recentCalls })}\n`);
          return 0;
        }
        const frame = renderFrame(view, previous, { nowMs, columns: io.terminal?.columns ?? 200, intervalSeconds: live ? intervalSeconds : undefined });
        previous = usageByRow(view);
        io.out(live ? `${CLEAR}${frame}\n` : `${frame}\n`);
        if (!live) return 0;
      }
    } finally {
      process.off('SIGINT', quit);
      process.off('SIGTERM', quit);
      io.outClosed?.removeEventListener('abort', quit);
      if (live) io.out(SHOW_CURSOR);
    }
  }, { reap: false });
}
