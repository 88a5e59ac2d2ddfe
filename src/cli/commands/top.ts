import { setTimeout as sleep } from 'node:timers/promises';
import type { Broker } from '../../broker/broker.js';
import type { SandboxUsage } from '../../broker/sandbox-usage.js';
import type { JobRecord } from '../../broker/state/job-table.js';
import { UsageError } from '../../errors.js';
import { COMMON_OPTIONS, parseFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { renderFrame, type TopView } from '../top/render.js';
import { engineFigures, topRows, usageByRow, type EngineFigures } from '../top/rows.js';
import { HIDE_CURSOR, paint, SHOW_CURSOR } from '../top/screen.js';
import { withBroker } from '../with-broker.js';

const TOP_HELP = `usage: berth top [--interval S] [--once] [--calls N] [--json]

The operator's live view of this installation, on this host: every tenant against its limits,
the sandboxes with their state and the CPU, memory and processes their engine counts (busiest
first), the latest background jobs by session, and the latest calls of every tenant. On a terminal
it redraws in place every --interval seconds until Ctrl-C (over SSH too): the first frame comes at
once from berth's store, state, memory and processes fill in when the engines answer (their stats
take up to a second), CPU a second later (it needs two samples); "…" marks a figure being read, "-"
one the backend cannot tell. Columns drop as the terminal narrows (the profile, backend and memory
limit first; the sandbox, its state, CPU and memory last), and sections are cut to its height.
Otherwise, or with --once, it prints one complete frame (after about two seconds) and exits. It
only reads: nothing is started, stopped or reaped.

  --interval S  seconds between frames on a terminal (default 2, at least 0.5)
  --once        one frame, then exit
  --calls N     recent calls shown (default 10, at most 100)
  --json        the view as one JSON object (implies --once)`;

/** Jobs a frame lists (the newest of every tenant). */
const RECENT_JOBS = 20;

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
  const terminal = values.once !== true && values.json !== true ? io.terminal : undefined;

  return withBroker(io, values.config, async (broker) => {
    const stop = new AbortController();
    const quit = (): void => stop.abort();
    process.once('SIGINT', quit);
    process.once('SIGTERM', quit);
    io.outClosed?.addEventListener('abort', quit);
    let figures: EngineFigures | undefined;
    let previous = new Map<string, SandboxUsage>();
    let sampledMs = 0;
    const view = (): TopView => ({ store: broker.storeOverview({ recentCalls: calls, recentJobs: RECENT_JOBS }), figures, previous });
    let painted = 0;
    const draw = (): void => {
      if (terminal === undefined || stop.signal.aborted) return;
      const frame = renderFrame(view(), { nowMs: Date.now(), columns: terminal.columns, rows: terminal.rows, intervalSeconds });
      io.out(paint(frame, painted++ === 0));
    };
    const redraw = (): void => draw();
    if (terminal !== undefined) {
      io.out(HIDE_CURSOR);
      process.stdout.on('resize', redraw);
      // What the store knows, at once; the engines' figures fill in as they answer.
      draw();
    }
    try {
      for (let reads = 0; ; reads++) {
        if (reads > 0) {
          // The engine's stats answer on its own one-second tick: the wait counts from the last ask.
          const gapMs = reads === 1 || terminal === undefined ? 1_000 : intervalSeconds * 1_000;
          const waited = await sleep(Math.max(0, sampledMs + gapMs - Date.now()), true, { signal: stop.signal }).catch(() => false);
          if (!waited) return 0;
        }
        sampledMs = Date.now();
        const read = await untilAborted(readEngines(broker), stop.signal);
        if (read === undefined) return 0;
        previous = usageByRow(figures);
        figures = read;
        if (reads === 0) continue;
        if (terminal !== undefined) {
          draw();
          continue;
        }
        const v = view();
        const nowMs = Date.now();
        if (values.json === true) {
          const sandboxes = topRows(v.store.sandboxes, figures, previous, nowMs).map(({ pending: _p, ...r }) => r);
          io.out(`${JSON.stringify({ timeMs: nowMs, sandboxes, jobs: v.store.recentJobs.map(jobJson), recentCalls: v.store.recentCalls })}\n`);
        } else {
          io.out(`${renderFrame(v, { nowMs, columns: io.terminal?.columns ?? 200, rows: undefined, intervalSeconds: undefined })}\n`);
        }
        return 0;
      }
    } finally {
      process.off('SIGINT', quit);
      process.off('SIGTERM', quit);
      io.outClosed?.removeEventListener('abort', quit);
      if (terminal !== undefined) {
        process.stdout.off('resize', redraw);
        io.out(SHOW_CURSOR);
      }
    }
  }, { reap: false });
}

/** The engines' figures of every sandbox, read once. */
async function readEngines(broker: Broker): Promise<EngineFigures> {
  return engineFigures(await broker.overview({ recentCalls: 0 }));
}

/** `p`'s value, or undefined as soon as `signal` aborts (Ctrl-C does not wait for a slow engine). */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  if (signal.aborted) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    const onAbort = (): void => resolve(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** A job as `--json` shows it (not its host dir or stored scope). */
function jobJson(j: JobRecord): Record<string, unknown> {
  return { jobId: j.id, tenant: j.tenant, profile: j.profile, session: j.session, status: j.status, exitCode: j.exitCode, startedMs: j.startedMs, command: j.command };
}
