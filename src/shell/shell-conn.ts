import type { Readable } from 'node:stream';
import type { ShellGroups, ShellTransport } from './transport.js';
import { BeginScanner, MarkerScanner, beginKey, parseStderrTrailer, parseStdoutTrailer } from './protocol.js';
import type { StreamName } from './output-capture.js';

/** Where the bytes of the running exchange go; at most one at a time. */
interface Sink {
  data(stream: StreamName, chunk: Buffer): void;
  ended(code: number | null): void;
}

export type Outcome =
  | { kind: 'ok'; status: number; cwd: string; jobs: number[] }
  /**
   * `began`: false only when it is certain the shell ended before anything of the command ran: no
   * begin marker came, and none can have been lost on the way (its exit code was seen, or its
   * streams are pipes on berth's host, whose bytes all arrive before their end). True also when the
   * exchange has no begin marker (the init): berth cannot tell.
   */
  | { kind: 'dead'; code: number | null; began: boolean }
  | { kind: 'abandoned' };

export interface Exchange {
  outcome: Promise<Outcome>;
  /** Stop listening (shell being replaced); payload held back so far is delivered first. */
  abandon(): void;
}

/** How long after an end is seen to wait for the other half (exit code or last bytes). */
const EXIT_AFTER_EOF_MS = 1000;

/**
 * One bash process behind a transport. Always reads both streams (a full pipe would block the
 * shell); bytes go to the current exchange or are dropped between commands.
 */
export class ShellConn {
  /** The shell's pid inside the sandbox, known once the init exchange completed. */
  pid = 0;
  /** Its pid on berth's host, where its backend can tell (a process in the sandbox's command groups that is the shell, not a command's). */
  hostPid: number | undefined;
  /** fd 0 of the shell is /dev/null (it re-executed onto the control pipe). */
  stdinIsNull = false;
  /** Tag of the shell whose snapshot this one loaded at start ('' if none). */
  loadedFrom = '';
  /** Its command groups, where the sandbox has the kernel's grouping and the shell was adopted. */
  group: ShellGroups | undefined;
  isDead = false;
  /** Resolves with the exit code (null if unknown) once the shell is gone; never rejects. */
  readonly dead: Promise<number | null>;
  private sink: Sink | undefined;
  private settleDead: (code: number | null) => void = () => undefined;

  constructor(
    readonly transport: ShellTransport,
    /** This shell's tag (`SHELL_TAG_VAR` in its environment, the last line of its snapshots). */
    readonly tag: string,
    drainMs: number,
    private readonly log: (msg: string) => void,
  ) {
    const forward = (stream: StreamName) => (chunk: Buffer | string) => {
      this.sink?.data(stream, typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
    };
    transport.stdout.on('data', forward('stdout'));
    transport.stderr.on('data', forward('stderr'));
    transport.stdin.on('error', (err: Error) => log(`stdin: ${err.message}`));
    transport.stdout.on('error', (err: Error) => log(`stdout: ${err.message}`));
    transport.stderr.on('error', (err: Error) => log(`stderr: ${err.message}`));
    const stdoutEnded = endOf(transport.stdout);
    const streamsEnded = Promise.all([stdoutEnded, endOf(transport.stderr)]);

    this.dead = new Promise<number | null>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const settle = (code: number | null): void => {
        if (this.isDead) return;
        this.isDead = true;
        if (timer !== undefined) clearTimeout(timer);
        resolve(code);
      };
      this.settleDead = settle;
      transport.exited.then(settle, () => settle(null));
      void stdoutEnded.then(() => {
        if (!this.isDead) timer = setTimeout(() => settle(null), EXIT_AFTER_EOF_MS);
      });
    });

    void this.dead.then(async (code) => {
      // Let the last bytes arrive, but a background process may hold the pipes open forever.
      let t: NodeJS.Timeout | undefined;
      await Promise.race([streamsEnded, new Promise<void>((r) => (t = setTimeout(r, drainMs)))]);
      clearTimeout(t);
      const sink = this.sink;
      this.sink = undefined;
      sink?.ended(code);
    });
  }

  /**
   * The sandbox says the shell process is gone while its streams stay open (a background job
   * holds them): treat it as ended. The streams are still read (and dropped) until they end.
   */
  markGone(): void {
    this.settleDead(null);
  }

  /** End the shell's input (EOF once it read what was written). */
  endInput(): void {
    if (!this.transport.stdin.destroyed && !this.transport.stdin.writableEnded) this.transport.stdin.end();
  }

  write(text: string): void {
    if (this.isDead || this.transport.stdin.destroyed || this.transport.stdin.writableEnded) return;
    this.transport.stdin.write(text);
  }

  /**
   * Send `frame` and collect until both trailers (keyed by `nonce`) arrived or the shell died.
   * `onPayload` gets the command's bytes, without markers. `begins`: the frame prints the begin
   * marker (a command's frame does, the init does not).
   */
  exchange(frame: string, nonce: string, onPayload: (stream: StreamName, chunk: Buffer) => void, begins = false): Exchange {
    const key = Buffer.from(`${nonce}~`);
    const out = new MarkerScanner(key, (b) => onPayload('stdout', b));
    const err = new MarkerScanner(key, (b) => onPayload('stderr', b));
    const begin = begins ? new BeginScanner(beginKey(nonce), (b) => out.push(b)) : undefined;
    let settle: (o: Outcome) => void = () => undefined;
    const outcome = new Promise<Outcome>((resolve) => (settle = resolve));
    let settled = false;
    const finish = (o: Outcome): void => {
      if (settled) return;
      settled = true;
      if (this.sink === sink) this.sink = undefined;
      if (o.kind !== 'ok') {
        begin?.flush();
        out.flush();
        err.flush();
      }
      settle(o);
    };
    const sink: Sink = {
      data: (stream, chunk) => {
        if (stream === 'stderr') err.push(chunk);
        else if (begin !== undefined) begin.push(chunk);
        else out.push(chunk);
        if (out.trailer !== undefined && err.trailer !== undefined) {
          const parsed = parseStdoutTrailer(out.trailer);
          const jobs = parseStderrTrailer(err.trailer);
          finish(parsed === undefined ? { kind: 'ok', status: 1, cwd: '', jobs } : { kind: 'ok', ...parsed, jobs });
        }
      },
      ended: (code) => finish({ kind: 'dead', code, began: begin === undefined || begin.seen || (code === null && this.transport.hostPipes !== true) }),
    };
    if (this.isDead) {
      finish({ kind: 'dead', code: null, began: begin === undefined });
    } else {
      this.sink = sink;
      this.write(frame);
    }
    return { outcome, abandon: () => finish({ kind: 'abandoned' }) };
  }

  /** End the shell process; never throws. */
  async kill(): Promise<void> {
    this.sink = undefined;
    try {
      await this.transport.kill();
    } catch (err) {
      this.log(`kill: ${(err as Error).message}`);
    }
  }
}

function endOf(s: Readable): Promise<void> {
  return new Promise<void>((resolve) => {
    if (s.readableEnded || s.destroyed) {
      resolve();
      return;
    }
    s.once('end', () => resolve());
    s.once('close', () => resolve());
  });
}
