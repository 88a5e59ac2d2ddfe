import type { Sandbox } from '../backends/backend.js';
import { BerthError, SandboxNotFoundError } from '../errors.js';
import type { JobLedger } from './job-ledger.js';
import { READ_SCRIPT, tagOf } from './job-scripts.js';
import type { JobRecord, JobTable } from './state/job-table.js';

/** Bound of one helper run in a job's sandbox. */
export const HELPER_TIMEOUT_MS = 15_000;

/** A job as its sandbox reports it: its exit code once recorded, whether it runs, its output's size and the bytes read. */
export interface JobState {
  exitCode: number | null;
  alive: boolean;
  size: number;
  bytes: Buffer;
}

/** What a job's sandbox says of it: its state and output, and whether a sandbox still runs any (the idle reaper asks). */
export class JobProbe {
  constructor(private readonly opts: { jobs: Pick<JobTable, 'runningIn'>; ledger: Pick<JobLedger, 'settle' | 'settleGone'> }) {}

  /** The job's state and up to `maxBytes` of its output from `offset`; undefined when the sandbox or the job's dir is gone. */
  async probe(job: JobRecord, sandbox: Sandbox, offset: number, maxBytes: number): Promise<JobState | undefined> {
    let r;
    try {
      // The answer is a header line and at most `maxBytes` of output; more is not the script talking.
      r = await sandbox.execOnce(['sh', '-c', READ_SCRIPT, 'sh', job.dir, String(offset), String(maxBytes), tagOf(job.id)], {
        timeoutMs: HELPER_TIMEOUT_MS, maxOutputBytes: maxBytes + 64 * 1024,
      });
    } catch (err) {
      if (err instanceof SandboxNotFoundError) return undefined;
      throw err;
    }
    const out = r.stdout;
    const nl = out.indexOf(0x0a);
    const header = (nl === -1 ? out : out.subarray(0, nl)).toString('utf8').trim().split(' ');
    if (header[0] === 'missing') return undefined;
    if (header[0] !== 'ok' || header.length !== 4) {
      throw new BerthError('job_read_failed', `reading job ${job.id} in sandbox "${job.sandboxKey}" failed: ${r.stderr.toString('utf8').trim() || 'unexpected helper output'}`);
    }
    const code = header[1] === '-' ? null : Number(header[1]);
    return {
      exitCode: code !== null && Number.isInteger(code) ? code : null,
      alive: header[2] === '1',
      size: Number(header[3]) || 0,
      bytes: out.subarray(nl + 1),
    };
  }

  /**
   * Whether a job still runs in this sandbox (idle reaper): jobs recorded as running are checked
   * in the sandbox, and their end is recorded when it is seen.
   */
  async activeIn(digest: string, sandbox: Sandbox): Promise<boolean> {
    const { jobs, ledger } = this.opts;
    let active = false;
    for (const job of jobs.runningIn(digest)) {
      const p = await this.probe(job, sandbox, 0, 0).catch(() => 'error' as const);
      if (p === 'error') {
        active = true; // cannot tell: do not reap on a guess
      } else if (p !== undefined && p.exitCode !== null) {
        ledger.settle(job, 'exited', p.exitCode);
      } else if (p?.alive === true) {
        active = true;
      } else if (ledger.settleGone(job).status === 'running') {
        active = true; // being killed: the kill records its end
      }
    }
    return active;
  }
}
