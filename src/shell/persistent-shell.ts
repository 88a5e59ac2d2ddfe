import { rmSync } from 'node:fs';
import { debuglog } from 'node:util';
import { BerthError, ConfigError, TimeoutError, UsageError } from '../errors.js';
import { killCommandTree, signalPid } from './kill-tree.js';
import { ByteRedactor, OutputCapture } from './output-capture.js';
import { SNAPSHOT_CWD, TokenSource, buildFrame, buildInit, isShellName, printfFormat } from './protocol.js';
import { ShellConn, type Outcome } from './shell-conn.js';
import type { ExecResult, RunOptions, ShellOptions } from './types.js';

const debug = debuglog('berth:shell');

/** Bounds for the waits around a shell; every one is finite. Tests shorten them. */
export interface ShellTimings {
  /** Opening a shell and running its init script. */
  startTimeoutMs: number;
  /** The in-sandbox kill helper. */
  killTimeoutMs: number;
  /** After the kill: how long the shell may take to answer before it is replaced. */
  killGraceMs: number;
  /** After SIGUSR1 (dump the snapshot, then exit): how long before the shell is killed outright. */
  snapshotGraceMs: number;
  /** `close()`: how long the shell may take to dump its snapshot and exit. */
  closeTimeoutMs: number;
  /** After the shell ended: how long to wait for its last bytes. */
  drainMs: number;
}

export const DEFAULT_SHELL_TIMINGS: Readonly<ShellTimings> = {
  startTimeoutMs: 20_000,
  killTimeoutMs: 5_000,
  killGraceMs: 1_500,
  snapshotGraceMs: 1_500,
  closeTimeoutMs: 3_000,
  drainMs: 250,
};

/** ≥ 96 bits, as the protocol requires; 16 base64url chars. */
const NONCE_BYTES = 12;
/** Only has to be unique among a sandbox's commands; 12 base64url chars. */
const TAG_BYTES = 9;

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
  private current: { tag: string } | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;
  /** Spill file of the last command that spilled: kept (and its `fullOutputPath` valid) until the next one or close. */
  private lastSpill: string | undefined;
  private readonly redactor: ByteRedactor;
  private readonly snapshotPath: string;
  private readonly stdinPath: string;
  private readonly shellsDir: string;
  private readonly tokens = new TokenSource();

  private constructor(
    private readonly opts: ShellOptions,
    private readonly timings: ShellTimings,
  ) {
    this.cwd = opts.defaultCwd;
    this.redactor = new ByteRedactor(opts.redactValues ?? []);
    this.shellsDir = joinPosix(opts.stateDir, 'shells');
    this.snapshotPath = joinPosix(this.shellsDir, `${opts.shellId}.sh`);
    this.stdinPath = joinPosix(this.shellsDir, `${opts.shellId}.stdin`);
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
    await shell.openConn([...first, SNAPSHOT_CWD, opts.defaultCwd]);
    return shell;
  }

  /** True while a command runs or waits in the queue. */
  get busy(): boolean {
    return this.queued > 0;
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
      return this.runOne(command, opts);
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

  private async runOne(command: string, ro: RunOptions): Promise<ExecResult> {
    if (command.includes('\0')) throw new UsageError('the command contains a NUL byte; bash cannot run it');
    if (ro.workdir !== undefined && ro.workdir.includes('\0')) throw new UsageError('workdir contains a NUL byte');
    if (!(ro.timeoutMs > 0)) throw new UsageError(`timeoutMs must be a positive number, got ${ro.timeoutMs}`);
    const startedAt = Date.now();
    this.lastActivityMs = startedAt;
    let replaced = false;
    let conn = this.conn;
    if (conn === undefined || conn.isDead) {
      const cwd = this.cwd;
      await this.openConn([cwd, SNAPSHOT_CWD, this.opts.defaultCwd]);
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
    const ex = conn.exchange(frame, nonce, (stream, chunk) => capture.push(stream, chunk));
    this.current = { tag };

    let timedOut = false;
    let notice: string | undefined;
    let outcome: Outcome | 'timeout' | 'grace';
    const timer = timeout(Math.min(ro.timeoutMs, MAX_TIMER_MS), 'timeout' as const);
    try {
      outcome = await Promise.race([ex.outcome, timer.promise]);
    } finally {
      timer.cancel();
    }
    if (outcome === 'timeout') {
      timedOut = true;
      await this.killTree(conn, tag);
      const grace = timeout(this.timings.killGraceMs, 'grace' as const);
      try {
        outcome = await Promise.race([ex.outcome, grace.promise]);
      } finally {
        grace.cancel();
      }
      if (outcome === 'grace') {
        ex.abandon();
        replaced = (await this.replaceStuck(conn, tag)) || replaced;
        notice = replaced
          ? `berth: timed out after ${ro.timeoutMs} ms; the shell did not answer and was replaced (cwd, env, functions and aliases restored)`
          : `berth: timed out after ${ro.timeoutMs} ms; the shell did not answer and could not be reopened`;
      } else {
        notice = `berth: timed out after ${ro.timeoutMs} ms; the command's processes were killed`;
      }
    }
    this.current = undefined;

    let exitCode: number;
    if (outcome !== 'grace' && outcome.kind === 'ok') {
      exitCode = outcome.status;
      if (outcome.cwd !== '') this.cwd = outcome.cwd;
      this.jobs = outcome.jobs;
    } else if (outcome !== 'grace' && outcome.kind === 'dead') {
      exitCode = outcome.code ?? 125;
      if (this.closed) notice = 'berth: the shell was closed while the command ran';
      else if (outcome.code === null) notice = 'berth: the shell ended unexpectedly (was the sandbox removed?)';
      // A shell that exited on its own ran its EXIT trap: its snapshot holds its last cwd.
      const cleanExit = outcome.code !== null && outcome.code < 128;
      this.jobs = [];
      if (!this.closed) {
        try {
          await this.openConn(cleanExit ? [SNAPSHOT_CWD, this.cwd, this.opts.defaultCwd] : [this.cwd, SNAPSHOT_CWD, this.opts.defaultCwd]);
          replaced = true;
        } catch (err) {
          this.log(`reopen after the shell ended failed (will retry on the next command): ${String(err)}`);
          notice = `${notice ?? 'berth: the shell ended'}; it will be reopened on the next command`;
        }
      }
    } else {
      exitCode = 124;
    }
    if (timedOut) exitCode = 124;
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
      timedOut,
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

  private async killTree(conn: ShellConn, tag: string): Promise<void> {
    try {
      const n = await killCommandTree(this.opts.execOnce, {
        shellPid: conn.pid,
        tag,
        protectedPgids: this.jobs,
        timeoutMs: this.timings.killTimeoutMs,
      });
      this.log(`timeout: killed ${n} process(es) of the command`);
    } catch (err) {
      this.log(`kill helper failed: ${String(err)}`);
    }
  }

  /**
   * The shell did not answer after the kill (a builtin loop, or the script went on to its next
   * command): SIGUSR1 asks it to dump its snapshot and exit, and killing the tree again ends a
   * foreground child so bash runs that trap before anything else. If it still does not exit it
   * is killed; orphans still carrying the tag are killed too. Then a fresh shell is opened from
   * the snapshot. Returns whether a new shell is running.
   */
  private async replaceStuck(conn: ShellConn, tag: string): Promise<boolean> {
    try {
      await signalPid(this.opts.execOnce, conn.pid, 'USR1', this.timings.killTimeoutMs);
    } catch (err) {
      this.log(`USR1 to the shell failed: ${String(err)}`);
    }
    await this.killTree(conn, tag);
    const wait = timeout(this.timings.snapshotGraceMs, false);
    const dumped = await Promise.race([conn.dead.then(() => true), wait.promise]);
    wait.cancel();
    if (!dumped) {
      this.log('the shell did not exit on SIGUSR1; killing it');
      await conn.kill();
    }
    await this.killTree(conn, tag);
    if (this.conn === conn) this.conn = undefined;
    if (this.closed) return false;
    try {
      await this.openConn(dumped ? [SNAPSHOT_CWD, this.cwd, this.opts.defaultCwd] : [this.cwd, SNAPSHOT_CWD, this.opts.defaultCwd]);
      return true;
    } catch (err) {
      this.log(`reopen failed (will retry on the next command): ${String(err)}`);
      return false;
    }
  }

  /** Open a shell through the backend and run the init script; on failure nothing is left running. */
  private async openConn(cwdCandidates: readonly string[]): Promise<void> {
    const old = this.conn;
    this.conn = undefined;
    if (old !== undefined) await old.kill();
    const t = this.timings;
    const opening = this.opts.open();
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
    const conn = new ShellConn(transport, t.drainMs, (m) => this.log(m));
    const nonce = this.tokens.next(NONCE_BYTES);
    const init = buildInit({
      nonce,
      shellsDir: this.shellsDir,
      snapshotPath: this.snapshotPath,
      stdinPath: this.stdinPath,
      secretNames: this.opts.secretNames,
      cwdCandidates,
    });
    let startupBytes = 0;
    let lastStdoutByte = 0;
    const ex = conn.exchange(init, nonce, (stream, b) => {
      startupBytes += b.length;
      if (stream === 'stdout' && b.length > 0) lastStdoutByte = b[b.length - 1] as number;
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
      if (o === 'timeout') {
        throw new TimeoutError(`the shell "${this.opts.shellId}" did not start within ${t.startTimeoutMs} ms; is bash installed in the sandbox?`);
      }
      const code = o.kind === 'dead' ? o.code : null;
      throw new BerthError('shell_start_failed', `the shell "${this.opts.shellId}" exited while starting (exit code ${String(code)}); is bash installed in the sandbox?`);
    }
    if (startupBytes > 1) this.log(`startup wrote ${startupBytes} byte(s) (snapshot errors?)`);
    conn.pid = o.status;
    conn.stdinIsNull = lastStdoutByte === 0x6e; // 'n'
    this.cwd = o.cwd !== '' ? o.cwd : this.opts.defaultCwd;
    this.jobs = o.jobs;
    this.conn = conn;
    this.log(`shell started (pid ${conn.pid}, cwd ${this.cwd})`);
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
      conn.write('__bd;trap - EXIT;exit 0\n');
    } else {
      // A command is running: the USR1 trap dumps and exits once its foreground child is gone.
      await signalPid(this.opts.execOnce, conn.pid, 'USR1', this.timings.killTimeoutMs).catch((err: unknown) =>
        this.log(`USR1 at close failed: ${String(err)}`),
      );
      await this.killTree(conn, cur.tag);
    }
    const wait = timeout(this.timings.closeTimeoutMs, false);
    const exited = await Promise.race([conn.dead.then(() => true), wait.promise]);
    wait.cancel();
    if (!exited) {
      this.log('the shell did not exit at close; killing it');
      await conn.kill();
    }
  }

  private log(msg: string): void {
    debug(`[${this.opts.shellId}] ${msg}`);
  }
}

function closedError(): BerthError {
  return new BerthError('shell_closed', 'the shell is closed; start a new one to run commands');
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

/** Where the snapshot of `shellId` lives inside the sandbox. */
export function snapshotPathOf(stateDir: string, shellId: string): string {
  return joinPosix(joinPosix(stateDir, 'shells'), `${shellId}.sh`);
}
