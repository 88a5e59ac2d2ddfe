import type { StreamName } from './output-capture.js';

/**
 * bash's own report of a job that a signal ended, as a non-interactive bash writes it on its
 * stderr when it reaps the job: `/dev/fd/3: line 1:    16 Killed                  sleep 5` (the
 * shell's name, which is the script it reads, `bash` or the control pipe; the line number only
 * where bash knows one). Only the signals berth's kill sends, so a command's own
 * `Segmentation fault` report is never touched.
 */
const JOB_REPORT_RE = /^[^\s:]+: (?:line \d+: )?\s*\d+ (?:Killed|Terminated|Hangup)(?: \(core dumped\))? +\S.*$/;

/** What a command's partial line may grow to before it is passed on whole: a report is far shorter. */
const MAX_HELD_BYTES = 4096;

/**
 * The output of one command on its way to the capture. Once `arm`ed (berth is about to kill the
 * command: a timeout, a caller that went away), bash's reports of the jobs that kill ends are
 * dropped from stderr, so the caller reads berth's one line about the timeout and not bash's
 * job-control noise; everything else passes unchanged, in order. Until then nothing is held.
 * After arming, stderr is passed on a line at a time (a partial line is held until its newline,
 * `MAX_HELD_BYTES`, or `flush`), so a report split across reads is still found.
 *
 * @example
 * const reports = new JobReportFilter((stream, chunk) => capture.push(stream, chunk));
 * conn.exchange(frame, nonce, reports.push, true);
 * reports.arm(); await kill(); reports.flush();
 */
export class JobReportFilter {
  private armed = false;
  private held: Buffer = Buffer.alloc(0);
  /** Whether the next stderr byte starts a line (a report is only ever a whole line). */
  private atLineStart = true;

  constructor(private readonly sink: (stream: StreamName, chunk: Buffer) => void) {}

  readonly push = (stream: StreamName, chunk: Buffer): void => {
    if (stream === 'stdout' || !this.armed) {
      if (stream === 'stderr' && chunk.length > 0) this.atLineStart = chunk[chunk.length - 1] === 0x0a;
      this.sink(stream, chunk);
      return;
    }
    let data = this.held.length === 0 ? chunk : Buffer.concat([this.held, chunk]);
    for (let nl = data.indexOf(0x0a); nl >= 0; nl = data.indexOf(0x0a)) {
      this.line(data.subarray(0, nl + 1));
      data = data.subarray(nl + 1);
    }
    if (data.length > MAX_HELD_BYTES) {
      this.pass(data);
      data = Buffer.alloc(0);
    }
    this.held = Buffer.from(data);
  };

  /** From now on, bash's reports of killed jobs are dropped from stderr. */
  arm(): void {
    this.armed = true;
  }

  /** Passes on a partial line still held (the command's stream has ended). */
  flush(): void {
    if (this.held.length > 0) this.pass(this.held);
    this.held = Buffer.alloc(0);
  }

  private line(bytes: Buffer): void {
    if (this.atLineStart && JOB_REPORT_RE.test(bytes.toString('utf8', 0, bytes.length - 1))) return;
    this.pass(bytes);
  }

  private pass(bytes: Buffer): void {
    this.atLineStart = bytes[bytes.length - 1] === 0x0a;
    this.sink('stderr', bytes);
  }
}
