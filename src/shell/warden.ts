import type { ExecOnceOptions, ExecOnceResult, ShellTransport } from './transport.js';
import { BerthError, TimeoutError, UnsupportedError } from '../errors.js';
import { Logger } from '../logging/logger.js';
import { TokenSource } from './protocol.js';
import { WARDEN_ONCE, WARDEN_SCRIPT, wardenLoop } from './warden-script.js';

/** What the shell asks of whoever ends processes in its sandbox. */
export interface TreeInput {
  shellPid: number;
  /** The shell's own tag (`BERTH_SHELL_TAG`, in the environ of all it forks). */
  shellTag: string;
  /** The command's tag (`BERTH_CMD_TAG`). */
  cmdTag: string;
  /** Process groups of earlier background jobs: never touched. */
  protectedPgids: readonly number[];
}

export interface TimeoutReport {
  /** Processes of the command that were killed. */
  killed: number;
  /** `cont`: the shell catches SIGUSR1 and was let go on to dump and exit; `killed`: it did not
   * (the command removed berth's trap), so it was killed; `gone`: it had already ended. */
  shell: 'cont' | 'killed' | 'gone';
  /** The sandbox was out of pids and still is without the command's tree (containers only):
   * something else holds them, so a new shell may not start (or starts only in a moment's gap). */
  stillFull: boolean;
}

/**
 * Ends process trees inside one sandbox without starting a process there (see warden-script.ts).
 * `Warden` keeps one running; `OnceKiller` runs the same routine as a helper through `execOnce`
 * (it needs a free pid, so it is the fallback when no warden runs).
 */
export interface ProcessKiller {
  /** True when an operation starts no process in the sandbox (a warden that runs): cheap enough to poll. */
  isReady(): boolean;
  /** Stop the shell, SIGUSR1 it, end the command's tree, then let the shell go on or kill it. */
  timeout(k: TreeInput): Promise<TimeoutReport>;
  /** End the command's tree; `shellGone`: the shell has ended, take its own group's leftovers too. */
  endCommand(k: TreeInput, shellGone: boolean): Promise<number>;
  /** End the shell and everything it started, earlier background jobs included. */
  endShell(k: { shellPid: number; shellTag: string }): Promise<number>;
  /** End every process in the sandbox but its init (containers only; `UnsupportedError` on a host). */
  endAll(): Promise<void>;
  /** Whether the sandbox's pids are (nearly) all taken; false where it has no pids limit. */
  outOfPids(): Promise<boolean>;
  /** Send one signal (`0`: only check); false when the process is gone. */
  signal(pid: number, signal: 'KILL' | 'USR1' | '0'): Promise<boolean>;
}

export interface WardenOptions {
  /**
   * Opens a plain `bash --noprofile --norc` on stdin/stdout in the sandbox (the shell's seam), or
   * with `resident`, attaches to the warden that already runs there.
   */
  open: () => Promise<ShellTransport>;
  /**
   * The warden runs as the sandbox's main process from its start (a docker container's): `open`
   * attaches to it, nothing is started for it, and `close` only lets go of it.
   */
  resident?: boolean;
  /** True for containers: `endAll` may kill every process in the sandbox. Never on a host. */
  mayKillAll: boolean;
  /** Bound on opening and on each operation (a scan under a fork bomb takes seconds). */
  timeoutMs?: number;
  /** Prefix for debug lines (sandbox key, short id) when no `log` carries them. */
  label?: string;
  /** Debug lines (`berth:shell`, with the sandbox's key and ref). */
  log?: Logger | undefined;
}

const DEFAULT_TIMEOUT_MS = 20_000;
/** How long a warden whose input ended may take to exit before it is killed. */
const END_GRACE_MS = 1_000;
/** The warden prints nothing but short reply lines; more is a replaced bash flooding output. */
const MAX_PENDING_CHARS = 64 * 1024;

function pgids(list: readonly number[]): string {
  return list.length === 0 ? '-' : list.join(',');
}

function treeArgs(k: TreeInput): string[] {
  return [String(k.shellPid), k.shellTag, k.cmdTag, pgids(k.protectedPgids)];
}

function parseTimeout(reply: string[]): TimeoutReport {
  const killed = Number(reply[0]);
  const shell = reply[1] === 'cont' || reply[1] === 'killed' ? reply[1] : 'gone';
  return { killed: Number.isInteger(killed) ? killed : 0, shell, stillFull: reply[2] === 'full' };
}

function count(reply: string[]): number {
  const n = Number(reply[0]);
  return Number.isInteger(n) ? n : 0;
}

/** Shared by both killers: the operations as argument lists, replies parsed. */
abstract class KillerBase implements ProcessKiller {
  protected abstract call(op: string, args: string[]): Promise<string[]>;
  protected abstract readonly mayKillAll: boolean;
  abstract isReady(): boolean;

  async timeout(k: TreeInput): Promise<TimeoutReport> {
    return parseTimeout(await this.call('t', treeArgs(k)));
  }

  async endCommand(k: TreeInput, shellGone: boolean): Promise<number> {
    return count(await this.call(shellGone ? 'r' : 'c', treeArgs(k)));
  }

  async endShell(k: { shellPid: number; shellTag: string }): Promise<number> {
    return count(await this.call('f', [String(k.shellPid), k.shellTag]));
  }

  async outOfPids(): Promise<boolean> {
    return (await this.call('n', []))[0] === 'full';
  }

  async signal(pid: number, signal: 'KILL' | 'USR1' | '0'): Promise<boolean> {
    return (await this.call('s', [signal, String(pid)]))[0] === '1';
  }

  async endAll(): Promise<void> {
    if (!this.mayKillAll) throw new UnsupportedError('ending every process is only done in a container sandbox, never on a host backend');
    if ((await this.call('a', []))[0] !== '1') throw new UnsupportedError('this killer may not end every process in the sandbox');
  }
}

/**
 * A warden bash kept running in a sandbox from the time its first shell opens (or from the
 * sandbox's start, when it is the sandbox's main process: `resident`), so that a kill needs no
 * new process there. One operation at a time; each answers one line keyed by an id. If it died (a
 * command may kill it) it is reopened at the next use, which needs a free pid; a resident one
 * that died took its container with it.
 */
export class Warden extends KillerBase implements AsyncDisposable {
  protected readonly mayKillAll: boolean;
  private conn: Promise<WardenConn> | undefined;
  /** The connection once open. */
  private running: WardenConn | undefined;
  private chain: Promise<unknown> = Promise.resolve();
  private closed = false;
  private readonly ids = new TokenSource();
  private readonly timeoutMs: number;

  constructor(private readonly opts: WardenOptions) {
    super();
    this.mayKillAll = opts.mayKillAll;
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  /**
   * Start it now (the first shell of a sandbox opens) unless it runs. Resolves once it runs or
   * failed to start (never rejects; a failed start is retried at first use).
   */
  async start(): Promise<void> {
    if (this.closed) return;
    await this.connect().catch((err: unknown) => this.log(`could not start: ${String(err)}`));
  }

  isReady(): boolean {
    return this.running !== undefined && !this.running.dead;
  }

  /** Pid of the running warden inside the sandbox, if one runs (tests, diagnostics). */
  async pid(): Promise<number | undefined> {
    const c = await this.conn?.catch(() => undefined);
    return c !== undefined && !c.dead ? c.pid : undefined;
  }

  /**
   * Ends the warden: the end of its input ends its loop, so no process is started for it (which a
   * transport kill may need) and nothing is waited for; one still opening is ended once open.
   */
  async close(): Promise<void> {
    this.closed = true;
    const opening = this.conn;
    this.conn = undefined;
    this.running = undefined;
    void opening?.then((c) => c.end(), () => undefined);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  protected call(op: string, args: string[]): Promise<string[]> {
    const p = this.chain.then(async () => {
      const conn = await this.connect();
      return conn.request(`${op} ${this.ids.next(9)}`, args, this.timeoutMs);
    });
    this.chain = p.catch(() => undefined);
    return p;
  }

  private async connect(): Promise<WardenConn> {
    if (this.closed) throw new BerthError('warden_closed', 'the sandbox is closing; its warden is gone');
    const current = await this.conn?.catch(() => undefined);
    if (current !== undefined && !current.dead) return current;
    const opening = WardenConn.open(this.opts, this.mayKillAll, this.timeoutMs, (m) => this.log(m));
    this.conn = opening;
    const conn = await opening;
    if (this.conn === opening) this.running = conn;
    return conn;
  }

  private log(msg: string): void {
    (this.opts.log ?? Logger.silent()).debug(`warden${this.opts.label !== undefined ? ` ${this.opts.label}` : ''}: ${msg}`);
  }
}

/** What the warden needs of a sandbox: its resident warden where it has one, else a way to open a bash there. */
export interface WardenHost {
  readonly attachWarden?: (() => Promise<ShellTransport>) | undefined;
  openShell(opts: { env: Readonly<Record<string, string>>; cwd: string }): Promise<ShellTransport>;
  readonly defaultCwd: string;
}

/**
 * The warden of `sandbox`: the one resident there when its backend starts one with the sandbox
 * (`attachWarden`), else a bash opened in it on first use.
 */
export function wardenFor(sandbox: WardenHost, opts: Omit<WardenOptions, 'open' | 'resident'>): Warden {
  const attach = sandbox.attachWarden;
  return new Warden({
    ...opts,
    resident: attach !== undefined,
    open: attach ?? (() => sandbox.openShell({ env: {}, cwd: sandbox.defaultCwd })),
  });
}

/** One running warden process. */
class WardenConn {
  dead = false;
  pid = 0;
  private pending = '';
  private waiter: { id: string; resolve: (words: string[]) => void } | undefined;
  private failWaiter: (err: Error) => void = () => undefined;

  private constructor(readonly transport: ShellTransport, private readonly resident: boolean, private readonly log: (msg: string) => void) {
    transport.stdout.on('data', (chunk: Buffer | string) => this.onData(chunk.toString()));
    transport.stderr.on('data', () => undefined);
    for (const s of [transport.stdin, transport.stdout, transport.stderr]) s.on('error', (err: Error) => log(err.message));
    void transport.exited.then(
      () => this.ended(),
      () => this.ended(),
    );
  }

  static async open(opts: WardenOptions, mayKillAll: boolean, timeoutMs: number, log: (msg: string) => void): Promise<WardenConn> {
    const started = Date.now();
    const resident = opts.resident === true;
    const transport = await withDeadline(opts.open(), timeoutMs, resident ? 'attaching to the warden' : 'opening the warden');
    const conn = new WardenConn(transport, resident, log);
    try {
      const left = Math.max(1, timeoutMs - (Date.now() - started));
      let words: string[];
      if (resident) {
        words = await conn.request(`p ${new TokenSource().next(9)}`, [], left);
      } else {
        conn.transport.stdin.write(`${WARDEN_SCRIPT}${wardenLoop(mayKillAll)}`);
        words = await conn.wait('warden', left);
      }
      conn.pid = Number(words[0]);
      log(`${resident ? 'attached' : 'running'} (pid ${conn.pid})`);
      return conn;
    } catch (err) {
      await transport.kill();
      throw err;
    }
  }

  /**
   * Ends its input (its loop then ends); killed if it is still there a moment later. A resident
   * warden is only let go of: its transport's kill ends the attachment, never the process.
   */
  end(): void {
    if (this.resident) {
      void this.transport.kill();
      return;
    }
    if (!this.transport.stdin.destroyed && !this.transport.stdin.writableEnded) this.transport.stdin.end();
    const timer = setTimeout(() => void this.transport.kill(), END_GRACE_MS);
    timer.unref();
    void this.transport.exited.then(() => clearTimeout(timer), () => clearTimeout(timer));
  }

  request(head: string, args: string[], timeoutMs: number): Promise<string[]> {
    const id = head.slice(head.indexOf(' ') + 1);
    const reply = this.wait(id, timeoutMs);
    this.transport.stdin.write(`${[head, ...args].join(' ')}\n`);
    return reply;
  }

  private wait(id: string, timeoutMs: number): Promise<string[]> {
    if (this.dead) return Promise.reject(new BerthError('warden_gone', 'the warden has ended'));
    return withDeadline(
      new Promise<string[]>((resolve, reject) => {
        this.waiter = { id, resolve };
        this.failWaiter = reject;
        this.scan();
      }),
      timeoutMs,
      'the warden',
    ).finally(() => {
      this.waiter = undefined;
    });
  }

  private onData(text: string): void {
    this.pending += text;
    if (this.pending.length > MAX_PENDING_CHARS) {
      this.log('flooded its output; ending it');
      this.pending = '';
      void this.transport.kill();
      return;
    }
    this.scan();
  }

  private scan(): void {
    for (let nl = this.pending.indexOf('\n'); nl >= 0; nl = this.pending.indexOf('\n')) {
      const line = this.pending.slice(0, nl);
      this.pending = this.pending.slice(nl + 1);
      const [first, ...rest] = line.trim().split(/\s+/);
      const w = this.waiter;
      if (w !== undefined && first === w.id) {
        this.waiter = undefined;
        w.resolve(rest);
        return;
      }
    }
  }

  private ended(): void {
    this.dead = true;
    this.failWaiter(new BerthError('warden_gone', 'the warden ended while berth waited for it'));
  }
}

/**
 * The warden's routine run once as a helper (`bash -c`) through `execOnce`: the fallback when no
 * warden runs. It needs a free pid in the sandbox, which a fork bomb may have taken.
 */
export class OnceKiller extends KillerBase {
  private readonly ids = new TokenSource();

  constructor(
    private readonly execOnce: (argv: string[], opts?: ExecOnceOptions) => Promise<ExecOnceResult>,
    protected readonly mayKillAll: boolean,
    private readonly timeoutMs = DEFAULT_TIMEOUT_MS,
  ) {
    super();
  }

  isReady(): boolean {
    return false;
  }

  protected async call(op: string, args: string[]): Promise<string[]> {
    const id = this.ids.next(9);
    const r = await this.execOnce(['bash', '-c', `${WARDEN_SCRIPT}${WARDEN_ONCE}`, 'berth-warden', op, id, ...args], {
      timeoutMs: this.timeoutMs,
      maxOutputBytes: MAX_PENDING_CHARS,
    });
    const line = r.stdout.toString('utf8').split('\n').find((l) => l.startsWith(`${id} `));
    if (line === undefined) {
      throw new BerthError('kill_helper_failed', `the kill helper did not answer (exit ${r.exitCode}): ${r.stderr.toString('utf8').slice(0, 200)}`);
    }
    return line.trim().split(/\s+/).slice(1);
  }
}

function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(`${what} did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, deadline]).finally(() => clearTimeout(timer));
}
