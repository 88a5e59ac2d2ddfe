import { BerthError } from '../errors.js';
import type { CallScope } from '../scope/call-scope.js';
import { sessionRefOf, type ResolvedCall } from './resolve-call.js';
import type { JobRecord, JobTable } from './state/job-table.js';

const JOB_ID_RE = /^job_[0-9a-f]{16}$/;

/**
 * How long a kill's mark keeps readers from recording a job's end: about twice what a kill's
 * bounded steps take together (two group kills of 5 s, 10 s each on a kernel without
 * `cgroup.kill`; three helpers in the sandbox of `HELPER_TIMEOUT_MS`, 15 s, each: 65 s). A step
 * the engine or the ssh agent holds before its own timer starts can take longer; a read past the
 * mark answers `unknown`, and the kill still records `killed` when it ends.
 */
export const KILL_PENDING_MS = 120_000;

export type JobStatus = JobRecord['status'];

/** What the ledger asks of the call resolver: a stored (normalised) scope resolved again. */
export interface ScopeResolver {
  resolve(scope: CallScope): ResolvedCall;
}

/**
 * The store's index of jobs, with its rules: a job is found only by calls of its own session and
 * user (another user's job is not found, exactly like an unknown id); its starting call is
 * resolved again from its record; an end, once recorded, stays the truth (but for an unknown end
 * recorded while berth was killing the job: its kill records it as killed, `JobTable.endKilled`).
 */
export class JobLedger {
  constructor(private readonly opts: { jobs: Pick<JobTable, 'get' | 'end' | 'killStartedMs'>; resolver: ScopeResolver }) {}

  /** A job of the caller's session and user. */
  find(scope: CallScope, jobId: string): JobRecord {
    const job = typeof jobId === 'string' && JOB_ID_RE.test(jobId)
      ? this.opts.jobs.get(scope.tenant, scope.profile, sessionRefOf(scope), scope.user ?? null, jobId)
      : undefined;
    if (job === undefined) {
      throw new BerthError('job_not_found', `no job ${JSON.stringify(String(jobId))} in this session; list the session's jobs to see their ids`);
    }
    return job;
  }

  /** The call that started the job, resolved again (its sandbox may need reattaching); undefined if policy changed. */
  callOf(job: JobRecord): ResolvedCall | undefined {
    try {
      const stored = JSON.parse(job.scope) as CallScope;
      // The stored scope is the job's user's by construction; anything else is never resolved.
      if ((stored.user ?? null) !== job.user) return undefined;
      const call = this.opts.resolver.resolve(stored);
      return call.spec.digest === job.digest ? call : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * A reader found the job's processes gone (or its sandbox) and no exit code: its end is
   * `unknown`, recorded, unless a kill of it is under way (`JobKiller` marks it in the store, for
   * readers of any berth process): then nothing is recorded and it still reads as running, so no
   * reader is told `done` with an interim answer; the kill records `killed` in a moment. A mark
   * older than `KILL_PENDING_MS` is a kill whose process died: the end is then `unknown`.
   */
  settleGone(job: JobRecord): { status: JobStatus; exitCode: number | null } {
    if (job.status === 'running') {
      const killing = this.opts.jobs.killStartedMs(job.id);
      if (killing !== undefined && Date.now() - killing < KILL_PENDING_MS) return { status: 'running', exitCode: null };
    }
    return this.settle(job, 'unknown', null);
  }

  /** Records an end unless one was recorded before; returns the recorded truth (killed stays killed). */
  settle(job: JobRecord, status: 'exited' | 'unknown', exitCode: number | null): { status: JobStatus; exitCode: number | null } {
    if (job.status !== 'running') return { status: job.status, exitCode: job.exitCode };
    const fresh = this.opts.jobs.get(job.tenant, job.profile, job.session, job.user, job.id);
    if (fresh !== undefined && fresh.status !== 'running') return { status: fresh.status, exitCode: fresh.exitCode };
    this.opts.jobs.end(job.id, status, exitCode, Date.now());
    return { status, exitCode };
  }
}
