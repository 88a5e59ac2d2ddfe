import { rmSync } from 'node:fs';
import { BerthError, ConfigError, TimeoutError, UsageError } from '../errors.js';
import { Logger } from '../logging/logger.js';
import { ByteRedactor } from '../kit/redaction.js';
import { OutputCapture } from './output-capture.js';
import { JobReportFilter } from './job-report-filter.js';
import { DUMP_AND_EXIT, SHELL_TAG_VAR, SNAPSHOT_CWD, STARTED_LINE, TokenSource, buildFrame, buildInit, isShellName, parseInitPayload, printfFormat } from './protocol.js';
import { describeEnd, describeReplacement, restoredFrom, type Replacement } from './replacement.js';
import type { ProcessPids, ShellGroups, ShellTransport } from './transport.js';
import { ShellConn, type Exchange, type Outcome } from './shell-conn.js';
import type { ExecResult, RunOptions, ShellOptions } from './types.js';
import { OnceKiller, type ProcessKiller, type TreeInput } from './warden.js';

/** Bounds for the waits around a shell; every one is finite. Tests shorten them. */
export interface ShellTimings {
  /** Opening a shell and running its init script. */
  startTimeoutMs: number;
  /** One kill operation (the warden's, or the helper run through `execOnce`). */
  killTimeoutMs: number;
  /** After the command's tree was killed: how long the shell may take to dump its snapshot and exit before it is killed. */
  snapshotGraceMs: number;
  /** `close()`: how long the shell may take to dump its snapshot and exit. */
  closeTimeoutMs: number;
  /** After the shell ended: how long to wait for its last bytes. */
  drainMs: number;
}

const DEFAULT_SHELL_TIMINGS: Readonly<ShellTimings> = {
  startTimeoutMs: 20_000,
  killTimeoutMs: 20_000,
  snapshotGraceMs: 3_000,
  closeTimeoutMs: 3_000,
  drainMs: 250,
};

/** ≥ 96 bits, as the protocol requires; 16 base64url chars. */
const NONCE_BYTES = 12;
/** Only has to be unique among a sandbox's commands; 12 base64url chars. */
const TAG_BYTES = 9;

/** How often a shell that should be exiting is looked at. */
const GONE_POLL_MS = 25;

/** setTimeout's ceiling; longer values would fire at once. */
const MAX_TIMER_MS = 2_147_483_647;

/**
 * One persistent bash per shell identity, driven over the backend's duplex stream (see
 * `protocol.ts` for the framing). Commands run one at a time, in call order; `cd`, `export`,
 * functions and aliases persist between them, and survive a replaced shell through a snapshot
 * file kept inside the sandbox.
 *
 * @example
 * await using shell = await PersistentShell.start({ open, execOnce, stateDir: '/tmp/.berth',
 *   shellId: 'default', defaultCwd: '/workspace', secretNames: [], spillDir, maxOutputChars: 100_000 });
 * const r = await shell.run('cd src && ls', { timeoutMs: 30_000 });
 * r.exitCode; r.output; r.cwd; // '/workspace/src'
 */
export class PersistentShell implements AsyncDisposable {
  /** Date.now() of the last command start or end. */
  lastActivityMs = Date.now();

  private conn: ShellConn | undefined;
  private cwd: string;
  private jobs: number[] = [];
  private chain: Promise<unknown> = Promise.resolve();
  private queued = 0;
  private current: { tag: string; conn: ShellConn } | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;
  /** Spill file of the last command that spilled: kept (and its `fullOutputPath` valid) until the next one or close. */
  private lastSpill: string | undefined;
  private readonly redactor: ByteRedactor;
  private readonly snapshotPath: string;
  private readonly stdinPath: string;
  private readonly shellsDir: string;
  private readonly tokens = new TokenSource();
  private readonly killer: ProcessKiller;
  private readonly fallbackKiller: ProcessKiller;
  private readonly logger: Logger;

  private constructor(
    private readonly opts: ShellOptions,
    private readonly timings: ShellTimings,
  ) {
    this.cwd = opts.defaultCwd;
    this.redactor = new ByteRedactor(opts.redactValues ?? []);
    this.shellsDir = shellsDirOf(opts.stateDir);
    this.snapshotPath = joinPosix(this.shellsDir, `${opts.shellId}.sh`);
    this.stdinPath = joinPosix(this.shellsDir, `${opts.shellId}.stdin`);
    this.fallbackKiller = new OnceKiller(opts.execOnce, false, timings.killTimeoutMs);
    this.killer = opts.killer ?? this.fallbackKiller;
    this.logger = opts.log ?? Logger.silent();
  }

  /** Open the shell, restore the snapshot if any, and pick the starting cwd. */
  static async start(opts: ShellOptions, timings: Partial<ShellTimings> = {}): Promise<PersistentShell> {
    for (const name of opts.secretNames) {
      if (!isShellName(name)) {
        throw new ConfigError(`secret name "${name}" is not a valid shell variable name; use letters, digits and _ only`);
      }
    }
    if (!opts.stateDir.startsWith('/')) {
      throw new ConfigError(`stateDir "${opts.stateDir}" must be an absolute path inside the sandbox`);
    }
    if (opts.shellId === '' || /[/\\\0]/.test(opts.shellId) || opts.shellId === '.' || opts.shellId === '..') {
      throw new ConfigError(`shell id "${opts.shellId}" cannot be used as a file name`);
    }
    if (!(opts.maxOutputChars > 0)) {
      throw new ConfigError(`maxOutputChars must be a positive number, got ${opts.maxOutputChars}`);
    }
    const shell = new PersistentShell(opts, { ...DEFAULT_SHELL_TIMINGS, ...timings });
    const first = opts.initialCwd !== undefined && opts.initialCwd !== '' ? [opts.initialCwd] : [];
    await shell.openConn([...first, SNAPSHOT_CWD, opts.defaultCwd], undefined);
    return shell;
  }

  /** True while a command runs or waits in the queue. */
  get busy(): boolean {
    return this.queued > 0;
  }

  /** False when the shell ended and no new one could start yet (the next `run` tries again). */
  get hasShell(): boolean {
    return this.conn !== undefined && !this.conn.isDead;
  }

  /** Whether the running shell loaded a saved state (a snapshot) when it started. */
  get loadedSavedState(): boolean {
    return (this.conn?.loadedFrom ?? '') !== '';
  }

  /** The running shell's pid on berth's host, where its backend can tell; undefined when it has none now. */
  get hostPid(): number | undefined {
    return this.conn === undefined || this.conn.isDead ? undefined : this.conn.hostPid;
  }

  /** Running background jobs started by earlier commands, as last reported by the shell. */
  backgroundJobCount(): number {
    return this.jobs.length;
  }

  /**
   * Run one command line. Never rejects for what the command does (failure, timeout, a shell
   * that died); rejects when the shell is closed or cannot be (re)opened.
   */
  run(command: string, opts: RunOptions): Promise<ExecResult> {
    if (this.closed) return Promise.reject(closedError());
    this.queued += 1;
    const p = this.chain.then(() => {
      if (this.closed) throw closedError();
      return this.runOne(command, opts, undefined);
    });
    const settled = p.finally(() => {
      this.queued -= 1;
    });
    this.chain = settled.catch(() => undefined);
    return settled;
  }

  /** Dump the snapshot and end the shell; bounded, idempotent, never throws. */
  close(): Promise<void> {
    this.closing ??= this.doClose().catch((err: unknown) => this.log(`close: ${String(err)}`));
    return this.closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /**
   * `rerun`: the shell this command was sent to had ended before it began; it is sent once more,
   * to the shell that took over, within what is left of the timeout, the result opening with
   * `rerun.notice` and timed from the first attempt's start.
   */
  private async runOne(command: string, ro: RunOptions, rerun: { notice: string; startedAt: number } | undefined): Promise<ExecResult> {
    if (command.includes('\0')) throw new UsageError('the command contains a NUL byte; bash cannot run it');
    if (ro.workdir !== undefined && ro.workdir.includes('\0')) throw new UsageError('workdir contains a NUL byte');
    if (!(ro.timeoutMs > 0)) throw new UsageError(`timeoutMs must be a positive number, got ${ro.timeoutMs}`);
    const startedAt = rerun?.startedAt ?? Date.now();
    this.lastActivityMs = Date.now();
    if (rerun !== undefined) ro = { ...ro, timeoutMs: Math.max(1, ro.timeoutMs - (Date.now() - startedAt)) };
    if (ro.signal?.aborted === true) return this.notRun(startedAt, rerun?.notice);
    let replaced = rerun !== undefined;
    let conn = this.conn;
    if (conn === undefined || conn.isDead) {
      const cwd = this.cwd;
      await this.openConn([cwd, SNAPSHOT_CWD, this.opts.defaultCwd], undefined);
      conn = this.conn as ShellConn;
      replaced = true;
    }

    const nonce = this.tokens.next(NONCE_BYTES);
    const tag = this.tokens.next(TAG_BYTES);
    const stdin = ro.stdin === undefined ? undefined : typeof ro.stdin === 'string' ? Buffer.from(ro.stdin) : ro.stdin;
    const frame = buildFrame({
      command,
      nonce,
      tag,
      workdir: ro.workdir,
      stdinFormat: stdin === undefined ? undefined : printfFormat(stdin),
      stdinPath: this.stdinPath,
      stdinIsNull: conn.stdinIsNull,
      hadJobs: this.jobs.length > 0,
    });
    const capture = new OutputCapture({
      maxChars: this.opts.maxOutputChars,
      spillDir: this.opts.spillDir,
      spillStem: this.opts.shellId,
      redactValues: this.opts.redactValues,
      onChunk: ro.onChunk,
    });
    if (rerun !== undefined) capture.push('stderr', Buffer.from(rerun.notice));
    await this.groupOp(conn, 'enter the command\'s group', (g) => g.prepare(ro.group));
    // bash reports each job a timeout's kill ends ("bash: line 1: 16 Killed ..."): berth's own notice says it once.
    const reports = new JobReportFilter((stream, chunk) => capture.push(stream, chunk));
    // Known dead before the frame went out: it was never sent.
    const unsent = conn.isDead;
    const ex = conn.exchange(frame, nonce, reports.push, true);
    this.current = { tag, conn };

    let notice: string | undefined;
    const stop = stopWhen(Math.min(ro.timeoutMs, MAX_TIMER_MS), ro.signal);
    let outcome: Outcome | 'timeout' | 'cancel';
    try {
      outcome = await Promise.race([ex.outcome, stop.promise]);
    } finally {
      stop.cancel();
    }
    let exitCode: number;
    if (outcome === 'timeout' || outcome === 'cancel') {
      // Nothing more of the command line may run: the shell is stopped, told to dump its state and
      // exit, the command's tree is killed, and a new shell takes over from the snapshot.
      const why = outcome === 'timeout'
        ? `timed out after ${ro.timeoutMs} ms`
        : `cancelled after ${Date.now() - startedAt} ms (the caller went away)`;
      exitCode = outcome === 'timeout' ? 124 : 130;
      const oldJobs = this.jobs.length;
      reports.arm();
      const stillFull = await this.endCommand(conn, tag, ex);
      reports.flush();
      this.jobs = [];
      const r = await this.takeOver(conn, oldJobs, stillFull);
      replaced = replaced || r.replaced;
      notice = `berth: ${why}; the command's processes were killed and ${r.text}`;
    } else if (outcome.kind === 'ok') {
      await this.groupOp(conn, 'leave the command\'s group', (g) => g.settle());
      exitCode = outcome.status;
      if (outcome.cwd !== '') this.cwd = outcome.cwd;
      this.jobs = outcome.jobs;
    } else {
      // 'abandoned' is only ever the outcome after a timeout or cancel.
      const code = outcome.kind === 'dead' ? outcome.code : null;
      exitCode = code ?? 125;
      const oldJobs = this.jobs.length;
      if (this.closed) {
        notice = 'berth: the shell was closed while the command ran';
      } else {
        // Killed (the OOM killer, a signal): what the command started is still running; an
        // `exit` leaves the command's own background processes alone, as a shell would.
        if (code === null || code >= 128) {
          const k: TreeInput = { shellPid: conn.pid, shellTag: conn.tag, cmdTag: tag, protectedPgids: this.jobs };
          if (code === null) {
            // Its end unseen (the link to it was lost), the shell may still run: as at a timeout, it
            // is taken out of the command's group (killing the group whole would take it too, unsaved)
            // and told to save its state and exit before the rest of the line runs. Left to go on, it
            // writes to the lost link and can die of SIGPIPE before its exit trap saves anything.
            await (this.groupTask(conn, 'end the cut-off command by its group', (g) => g.timeout())
              .then((byGroup) => byGroup ?? this.kill('end the cut-off command', (killer) => killer.timeout(k))));
          } else {
            await this.groupTask(conn, 'end the command\'s group', (g) => g.endCommand());
          }
          await this.kill('sweep', (killer) => killer.endCommand(k, true));
        }
        this.jobs = [];
        const r = await this.takeOver(conn, oldJobs);
        replaced = replaced || r.replaced;
        const began = outcome.kind !== 'dead' || outcome.began;
        if (!began) {
          // The shell ended before the command began (between commands: berth had not seen it
          // yet), so nothing of it ran. When the shell cannot have read the frame (its exit seen,
          // or the frame never sent) the command is sent once more, to the shell that took over;
          // an end unseen (it may live on and still read it) is never proof enough for that. With
          // no shell to take over, the call fails as when no shell could start before it (the
          // broker then looks for a sandbox removed or stopped out of band).
          this.current = undefined;
          const why = `${describeEnd(code)} before the command began`;
          if (!r.replaced) throw new BerthError('shell_start_failed', `${why}, and ${r.text}; the command was not run`);
          if ((code !== null || unsent) && rerun === undefined) {
            // Its bytes so far were background jobs' (streamed live already); a spill of them goes.
            const first = capture.finish();
            if (first.fullOutputPath !== undefined) rmSync(first.fullOutputPath, { force: true });
            return this.runOne(command, ro, { notice: `berth: ${why}; ${r.text}; the command was sent to the new shell\n`, startedAt });
          }
          exitCode = 125;
          notice = `berth: ${why} (it was not run); ${r.text}`;
        } else if (!(r.from === 'saved' && code !== null && code < 128)) {
          // An `exit` whose shell saved its state needs no word beyond `shellReplaced`.
          notice = `berth: ${describeEnd(code)}; ${r.text}`;
        }
      }
    }
    this.current = undefined;
    if (notice !== undefined) capture.push('stderr', Buffer.from(`${notice}\n`));
    const out = capture.finish();
    const endedAt = Date.now();
    this.lastActivityMs = endedAt;
    const result: ExecResult = {
      exitCode,
      stdout: out.stdout,
      stderr: out.stderr,
      output: out.output,
      cwd: this.redactor.redactString(this.cwd),
      durationMs: endedAt - startedAt,
      timedOut: outcome === 'timeout',
      truncated: out.truncated,
    };
    if (out.fullOutputPath !== undefined) {
      this.replaceSpill(out.fullOutputPath);
      // Closed while it ran: close has already cleaned up, so this file goes at once.
      if (this.closed) this.dropSpill();
      else result.fullOutputPath = out.fullOutputPath;
    }
    if (replaced) result.shellReplaced = true;
    return result;
  }

  /** A call cancelled before it started: nothing ran. `rerun`: the notice of a shell replaced before it. */
  private notRun(startedAt: number, rerun?: string): ExecResult {
    const text = `${rerun ?? ''}berth: cancelled before it started (the caller went away); nothing was run\n`;
    return {
      exitCode: 130, stdout: '', stderr: text, output: text, cwd: this.redactor.redactString(this.cwd),
      durationMs: Date.now() - startedAt, timedOut: false, truncated: false, ...(rerun === undefined ? {} : { shellReplaced: true }),
    };
  }

  /**
   * Ends a running command for good. Where the shell has command groups, the kernel's grouping
   * does it (see `ShellGroups.timeout`): everything the command started ends, whatever it did to
   * its environment, session or process group. Else the warden stops the shell, sends it SIGUSR1
   * and kills the command's tree as its tags find it. Once let go, bash runs the trap as soon as
   * its foreground child is gone, before the next element of the command line: it dumps its state
   * and exits (a line on its stdin does the same if it was between commands). A shell that no
   * longer catches SIGUSR1 is killed at once; one that does not exit in time is killed. Leftovers
   * of the command are swept again once the shell is gone. True when the sandbox was out of pids
   * and still is without the command's tree (see `takeOver`). Never throws.
   */
  private async endCommand(conn: ShellConn, tag: string, ex: Exchange): Promise<boolean> {
    const k: TreeInput = { shellPid: conn.pid, shellTag: conn.tag, cmdTag: tag, protectedPgids: this.jobs };
    const report = await this.groupTask(conn, 'timeout by the command\'s group', (g) => g.timeout())
      ?? await this.kill('timeout', (killer) => killer.timeout(k));
    if (report !== undefined) {
      this.log(`timeout: killed ${report.killed} process(es); the shell was ${report.shell}${report.stillFull ? '; the sandbox is out of pids without them' : ''}`);
    }
    if (report?.shell !== 'killed') conn.write(DUMP_AND_EXIT);
    await this.ensureGone(conn, this.timings.snapshotGraceMs);
    ex.abandon();
    if (this.conn === conn) this.conn = undefined;
    await this.kill('sweep', (killer) => killer.endCommand(k, true));
    return report?.stillFull === true;
  }

  /** Waits `ms` for the shell to exit, else kills it (through the killer first: a transport kill may need a new process). */
  private async ensureGone(conn: ShellConn, ms: number): Promise<void> {
    if (await this.waitGone(conn, ms)) return;
    this.log('the shell did not exit; killing it');
    await this.kill('kill the shell', (killer) => killer.signal(conn.pid, 'KILL'));
    if (!(await this.waitGone(conn, ms))) await conn.kill();
  }

  /**
   * Whether the shell process ended within `ms`. Its streams may stay open after it ended (a
   * background job holds them), so a running warden is asked too; the old transport is then left
   * to drain, not killed: on a container that kill would end the shell's background jobs as well.
   */
  private async waitGone(conn: ShellConn, ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    while (!conn.isDead && Date.now() < deadline) {
      if (this.killer.isReady()) {
        const limit = timeout(deadline - Date.now(), undefined);
        const alive = await Promise.race([this.killer.signal(conn.pid, '0').catch(() => undefined), limit.promise]);
        limit.cancel();
        if (alive === false) {
          conn.markGone();
          return true;
        }
      }
      // Timers are cleared: a pending one would keep a CLI process alive after its call.
      const pause = timeout(Math.max(0, Math.min(GONE_POLL_MS, deadline - Date.now())), undefined);
      await Promise.race([conn.dead, pause.promise]);
      pause.cancel();
    }
    return conn.isDead;
  }

  /**
   * Opens the shell that takes over from `old` (which has ended) and says what it restored. When
   * no shell can start (a sandbox out of pids: a fork bomb among the old shell's jobs), the old
   * shell's whole family is killed and then, in a container, every process in the sandbox.
   * `outOfPids`: the timeout found the sandbox out of pids without the command's tree, so the
   * plain new shell is not tried: under a bomb it can slip into a moment's gap and then starve
   * like the command did. The warden's later answer alone is such a moment's look. The old
   * shell's empty command groups go afterwards.
   */
  private async takeOver(
    old: ShellConn, jobs: number, outOfPids = false,
  ): Promise<{ replaced: boolean; from: Replacement['from'] | undefined; text: string }> {
    try {
      return await this.replace(old, jobs, outOfPids);
    } finally {
      await this.groupOp(old, 'release the old shell\'s groups', (g) => g.release());
    }
  }

  /** `takeOver`'s steps, each followed by a try at a new shell. */
  private async replace(
    old: ShellConn, jobs: number, outOfPids: boolean,
  ): Promise<{ replaced: boolean; from: Replacement['from'] | undefined; text: string }> {
    if (this.conn === old) this.conn = undefined;
    const candidates = [this.cwd, SNAPSHOT_CWD, this.opts.defaultCwd];
    const rep: Replacement = { from: 'none', cwd: '', jobs, jobsEnded: false, sandboxCleared: false };
    // Known only from a running warden; unknown (undefined) means: try.
    const full = async (): Promise<boolean | undefined> => (this.killer.isReady() ? this.killer.outOfPids().catch(() => undefined) : undefined);
    const steps: (() => Promise<boolean>)[] = [
      async () => true,
      async () => {
        const byGroups = await this.groupTask(old, 'end the old shell\'s groups', (g) => g.endAll());
        const byTags = await this.kill('end the old shell', (k) => k.endShell({ shellPid: old.pid, shellTag: old.tag }));
        return (rep.jobsEnded = byGroups !== undefined || byTags !== undefined);
      },
      async () => (rep.sandboxCleared = (await this.kill('end every process', (k) => k.endAll().then(() => true))) === true),
    ];
    let lastError: unknown;
    for (const [i, step] of steps.entries()) {
      if (this.closed || !(await step())) break;
      // No new shell can start in a sandbox out of pids: go on to the next step at once.
      if (i < steps.length - 1 && ((i === 0 && outOfPids) || (await full()) === true)) continue;
      try {
        await this.openConn(candidates, old.tag);
        const conn = this.conn as ShellConn;
        rep.from = restoredFrom(conn.loadedFrom, old.tag, old.loadedFrom);
        rep.cwd = this.redactor.redactString(this.cwd);
        return { replaced: true, from: rep.from, text: describeReplacement(rep) };
      } catch (err) {
        lastError = err;
        this.log(`opening a new shell failed: ${String(err)}`);
      }
    }
    const why = lastError instanceof Error ? lastError.message
      : this.closed ? 'the shell is closed' : 'the sandbox is out of pids and berth could not end what holds them';
    return { replaced: false, from: undefined, text: `no new shell could be started (${why}); the next command tries again` };
  }

  /** Runs one step on the shell's command groups, if it has them; false when it has none or the step failed (logged). */
  private async groupOp(conn: ShellConn, what: string, op: (groups: ShellGroups) => void | Promise<void>): Promise<boolean> {
    if (conn.group === undefined) return false;
    try {
      await op(conn.group);
      return true;
    } catch (err) {
      this.log(`${what}: ${String(err)}`);
      return false;
    }
  }

  /** As `groupOp`, for a step that waits; undefined when the shell has no groups or the step failed. */
  private async groupTask<T>(conn: ShellConn, what: string, op: (groups: ShellGroups) => Promise<T>): Promise<T | undefined> {
    if (conn.group === undefined) return undefined;
    try {
      return await op(conn.group);
    } catch (err) {
      this.log(`${what}: ${String(err)}`);
      return undefined;
    }
  }

  /** Runs one kill operation with the sandbox's killer, then with the helper if that failed. */
  private async kill<T>(what: string, op: (killer: ProcessKiller) => Promise<T>): Promise<T | undefined> {
    for (const killer of this.killer === this.fallbackKiller ? [this.killer] : [this.killer, this.fallbackKiller]) {
      try {
        return await op(killer);
      } catch (err) {
        this.log(`${what}: ${String(err)}`);
      }
    }
    return undefined;
  }

  /** Open a shell through the backend and run the init script; on failure nothing is left running. */
  private async openConn(cwdCandidates: readonly string[], preferSnapshotOf: string | undefined): Promise<void> {
    const old = this.conn;
    this.conn = undefined;
    if (old !== undefined) {
      await old.kill();
      await this.groupOp(old, 'release the old shell\'s groups', (g) => g.release());
    }
    const t = this.timings;
    const shellTag = this.tokens.next(TAG_BYTES);
    const opening = this.opts.open({ [SHELL_TAG_VAR]: shellTag });
    const openTimer = timeout(t.startTimeoutMs, undefined);
    let transport;
    try {
      transport = await Promise.race([opening, openTimer.promise]);
    } finally {
      openTimer.cancel();
    }
    if (transport === undefined) {
      // Whatever opens late must not be left running.
      opening.then((tr) => tr.kill(), () => undefined).catch(() => undefined);
      throw new TimeoutError(`opening the shell "${this.opts.shellId}" took over ${t.startTimeoutMs} ms; check the sandbox is running`);
    }
    const conn = new ShellConn(transport, shellTag, t.drainMs, (m) => this.log(m));
    const pids = await this.pidsOf(transport, t.startTimeoutMs);
    // In its group before its init runs: the init sources a snapshot the sandbox can write.
    conn.group = await this.adopt(pids);
    conn.hostPid = pids?.host;
    const nonce = this.tokens.next(NONCE_BYTES);
    const init = buildInit({
      nonce,
      shellsDir: this.shellsDir,
      snapshotPath: this.snapshotPath,
      stdinPath: this.stdinPath,
      secretNames: this.opts.secretNames,
      cwdCandidates,
      shellTag,
      preferSnapshotOf,
    });
    let startupBytes = 0;
    // The payload ends the init's stdout; only its end is kept (a broken snapshot may print).
    let stdoutTail = '';
    const ex = conn.exchange(init, nonce, (stream, b) => {
      startupBytes += b.length;
      if (stream === 'stdout') stdoutTail = (stdoutTail + b.toString('latin1')).slice(-64);
    });
    const initTimer = timeout(t.startTimeoutMs, 'timeout' as const);
    let o: Outcome | 'timeout';
    try {
      o = await Promise.race([ex.outcome, initTimer.promise]);
    } finally {
      initTimer.cancel();
    }
    if (o === 'timeout' || o.kind !== 'ok') {
      ex.abandon();
      await conn.kill();
      await this.groupOp(conn, 'release the shell\'s groups', (g) => g.release());
      if (o === 'timeout') {
        throw new TimeoutError(`the shell "${this.opts.shellId}" did not start within ${t.startTimeoutMs} ms; is bash installed in the sandbox?`);
      }
      const code = o.kind === 'dead' ? o.code : null;
      throw new BerthError('shell_start_failed', `the shell "${this.opts.shellId}" exited while starting (exit code ${String(code)}); is bash installed in the sandbox?`);
    }
    const payload = parseInitPayload(stdoutTail);
    if (startupBytes > stdoutTail.length || payload === undefined) this.log(`startup wrote ${startupBytes} byte(s) (snapshot errors?)`);
    // The backend's word for its pid beats the shell's own (a snapshot can make the init say any
    // pid, and what berth kills is found from it).
    conn.pid = pids?.sandbox ?? o.status;
    if (conn.pid !== o.status) this.log(`the shell said its pid is ${o.status}; its backend says ${conn.pid}`);
    conn.stdinIsNull = payload?.stdinIsNull ?? false;
    conn.loadedFrom = payload?.loadedFrom ?? '';
    this.cwd = o.cwd !== '' ? o.cwd : this.opts.defaultCwd;
    this.jobs = o.jobs;
    this.conn = conn;
    this.log(`shell started (pid ${conn.pid}, cwd ${this.cwd}${conn.group === undefined ? '' : ', in a command group'})`);
  }

  /**
   * The new shell's pids as its backend knows them, where it can tell. With command groups the
   * shell must run first (an engine may start an exec's process a moment after its stream opens):
   * it answers `STARTED_LINE` then.
   */
  private async pidsOf(transport: ShellTransport, timeoutMs: number): Promise<ProcessPids | undefined> {
    if (transport.pids === undefined) return undefined;
    try {
      if (this.opts.groups !== undefined) {
        const answered = firstChunk(transport, timeoutMs);
        transport.stdin.write(STARTED_LINE);
        await answered;
      }
      return await transport.pids();
    } catch (err) {
      this.log(`the backend could not tell the shell's pid: ${String(err)}`);
      return undefined;
    }
  }

  /**
   * The new shell's command groups, where the sandbox has the kernel's grouping: by its pids as its
   * backend knows them, never as the shell reports them.
   */
  private async adopt(pids: ProcessPids | undefined): Promise<ShellGroups | undefined> {
    if (this.opts.groups === undefined || pids === undefined) return undefined;
    try {
      return await this.opts.groups.adopt(pids);
    } catch (err) {
      this.log(`no command groups (its commands are found by tags): ${String(err)}`);
      return undefined;
    }
  }

  /** One spill file per shell: a new one replaces the previous command's. */
  private replaceSpill(path: string): void {
    if (this.lastSpill !== path) this.dropSpill();
    this.lastSpill = path;
  }

  private dropSpill(): void {
    const path = this.lastSpill;
    this.lastSpill = undefined;
    if (path === undefined) return;
    try {
      rmSync(path, { force: true });
    } catch (err) {
      this.log(`could not remove spill file ${path}: ${String(err)}`);
    }
  }

  private async doClose(): Promise<void> {
    try {
      await this.endShell();
    } finally {
      this.dropSpill();
    }
  }

  private async endShell(): Promise<void> {
    this.closed = true;
    const conn = this.conn;
    this.conn = undefined;
    if (conn === undefined || conn.isDead) return;
    const cur = this.current;
    if (cur === undefined) {
      // Idle: the line ends it, and so would the end of its input. If its streams stay open (a
      // background job holds them) and no warden runs to confirm it ended, it is left to end:
      // killing it through the transport would start a process in the sandbox, and on a
      // container end its background jobs too.
      conn.write(DUMP_AND_EXIT);
      conn.endInput();
      if (!(await this.waitGone(conn, this.timings.closeTimeoutMs)) && this.killer.isReady()) {
        await this.kill('kill the shell', (killer) => killer.signal(conn.pid, 'KILL'));
      }
      await this.groupOp(conn, 'release the shell\'s groups', (g) => g.release());
      return;
    }
    // A command is running: the USR1 trap dumps and exits once its foreground child is gone.
    const k: TreeInput = { shellPid: conn.pid, shellTag: conn.tag, cmdTag: cur.tag, protectedPgids: this.jobs };
    const report = await this.groupTask(conn, 'close by the command\'s group', (g) => g.timeout())
      ?? await this.kill('close', (killer) => killer.timeout(k));
    if (report?.shell !== 'killed') conn.write(DUMP_AND_EXIT);
    await this.ensureGone(conn, this.timings.closeTimeoutMs);
    await this.groupOp(conn, 'release the shell\'s groups', (g) => g.release());
  }

  private log(msg: string): void {
    this.logger.debug(`[${this.opts.shellId}] ${msg}`);
  }
}

function closedError(): BerthError {
  return new BerthError('shell_closed', 'the shell is closed; start a new one to run commands');
}

/** Resolves with 'timeout' after `ms`, or 'cancel' when `signal` aborts. */
function stopWhen(ms: number, signal: AbortSignal | undefined): { promise: Promise<'timeout' | 'cancel'>; cancel(): void } {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const promise = new Promise<'timeout' | 'cancel'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), ms);
    if (signal !== undefined) {
      onAbort = () => resolve('cancel');
      signal.addEventListener('abort', onAbort, { once: true });
    }
  });
  return {
    promise,
    cancel: () => {
      clearTimeout(timer);
      if (onAbort !== undefined) signal?.removeEventListener('abort', onAbort);
    },
  };
}

/** Resolves once the transport's stderr gave its first bytes, ended, or `ms` passed. */
function firstChunk(transport: ShellTransport, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      transport.stderr.off('data', done);
      transport.stderr.off('end', done);
      transport.stderr.off('close', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    transport.stderr.once('data', done);
    transport.stderr.once('end', done);
    transport.stderr.once('close', done);
  });
}

function timeout<T>(ms: number, value: T): { promise: Promise<T>; cancel(): void } {
  let timer: NodeJS.Timeout | undefined;
  const promise = new Promise<T>((resolve) => {
    timer = setTimeout(() => resolve(value), ms);
  });
  return { promise, cancel: () => clearTimeout(timer) };
}

/** In-sandbox paths are POSIX whatever the host is. */
function joinPosix(a: string, b: string): string {
  return a.endsWith('/') ? `${a}${b}` : `${a}/${b}`;
}

/** The dir of the shells' snapshots inside the sandbox. */
export function shellsDirOf(stateDir: string): string {
  return joinPosix(stateDir, 'shells');
}

/** Where the snapshot of `shellId` lives inside the sandbox. */
export function snapshotPathOf(stateDir: string, shellId: string): string {
  return joinPosix(joinPosix(stateDir, 'shells'), `${shellId}.sh`);
}
