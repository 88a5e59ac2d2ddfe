import { randomBytes } from 'node:crypto';
import { BerthError, UsageError } from '../errors.js';
import { redactText } from '../kit/redaction.js';
import type { CallScope } from '../scope/call-scope.js';
import type { AuditRecord } from './audit.js';
import type { JobKiller } from './job-killer.js';
import type { JobLedger } from './job-ledger.js';
import type { JobReader, SandboxFinder } from './job-reader.js';
import { jobGroup, startLine, tagOf } from './job-scripts.js';
import type { LiveSandbox } from './live-sandboxes.js';
import { sessionRefOf, type ResolvedCall } from './resolve-call.js';
import type { JobRecord, JobTable } from './state/job-table.js';

/** How long a job's start line may run in the call's shell (it returns once the wrapper recorded its pid). */
const START_LINE_TIMEOUT_SECONDS = 30;

export interface JobSummary {
  jobId: string;
  command: string;
  status: string;
  exitCode: number | null;
  startedMs: number;
}

/** The scope fields that name a job's session over the API (its tenant is the caller's). */
export interface JobScope {
  profile: string;
  session?: string;
  task?: string;
  user?: string;
}

/** A job as the dashboard lists it: its summary, its sandbox and the scope that reads or kills it. */
export interface TenantJob extends JobSummary {
  sandboxKey: string;
  scope: JobScope;
}

/** What the runner asks of the sandbox pool: the call's sandbox (created or reattached), or a job's if it still exists. */
export interface JobSandboxes extends SandboxFinder {
  acquire(call: ResolvedCall): Promise<LiveSandbox>;
}

/** What the runner asks of the command runner: one line through the call's persistent shell (no audit entry of its own). */
export interface LineRunner {
  run(call: ResolvedCall, line: string, opts: { workdir?: string | undefined; stdin: string; timeoutSeconds: number; group: string }): Promise<{ exitCode: number; output: string }>;
}

export interface JobRunnerOptions {
  jobs: Pick<JobTable, 'put' | 'delete' | 'list' | 'ofTenant'>;
  ledger: Pick<JobLedger, 'find' | 'callOf' | 'settle'>;
  reader: Pick<JobReader, 'read'>;
  killer: Pick<JobKiller, 'kill'>;
  sandboxes: JobSandboxes;
  commands: LineRunner;
  audit: { record(r: AuditRecord): void };
}

/**
 * Background jobs of one broker: start one in the call's sandbox, kill one, list a session's or a
 * tenant's. The state store only indexes jobs by tenant, session and end user (a job is seen,
 * read and killed only by calls of the same user, or of no user when it was started with none);
 * the truth about a job is what its sandbox says (see job-scripts.ts).
 */
export class JobRunner {
  constructor(private readonly opts: JobRunnerOptions) {}

  async start(call: ResolvedCall, command: string, opts: { workdir?: string } = {}): Promise<{ jobId: string; sandboxKey: string }> {
    if (typeof command !== 'string' || command.trim() === '') throw new UsageError('a job needs a command, e.g. "npm run build"');
    if (command.includes('\0')) throw new UsageError('the command contains a NUL byte; bash cannot run it');
    const { jobs, sandboxes, commands } = this.opts;
    const started = Date.now();
    const { sandbox } = await sandboxes.acquire(call);
    const id = `job_${randomBytes(8).toString('hex')}`;
    const dir = `${sandbox.stateDir.replace(/\/+$/, '')}/jobs/${id}`;
    if (!/^\/[A-Za-z0-9._/-]+$/.test(dir)) {
      throw new BerthError('job_start_failed', `the sandbox's state dir "${sandbox.stateDir}" cannot hold job files (unexpected characters)`);
    }
    const record: JobRecord = {
      id, tenant: call.scope.tenant, profile: call.scope.profile, session: call.sessionRef, user: call.scope.user ?? null,
      digest: call.spec.digest,
      sandboxKey: call.binding.sandboxKey, scope: JSON.stringify(storedScope(call.scope)),
      command: redactText(command, call.redactValues), dir, startedMs: started, status: 'running', exitCode: null, endedMs: null,
    };
    // Indexed before it runs: a crash in between leaves a record whose sandbox says "unknown", never a stray job.
    jobs.put(record);
    let r: { exitCode: number; output: string };
    try {
      r = await commands.run(call, startLine(dir, tagOf(id)), {
        workdir: opts.workdir, stdin: command, timeoutSeconds: START_LINE_TIMEOUT_SECONDS, group: jobGroup(id),
      });
    } catch (err) {
      jobs.delete(id);
      throw err;
    }
    if (r.exitCode !== 0) {
      jobs.delete(id);
      const why = r.output.trim().split('\n').slice(-3).join('; ');
      throw new BerthError('job_start_failed', `the job could not be started in sandbox "${call.binding.sandboxKey}" (exit ${r.exitCode})${why ? `: ${why}` : ''}`);
    }
    // `command` as given: the audit redacts it with the call's secrets.
    this.opts.audit.record({ kind: 'job', call, command, exitCode: null, startedMs: started });
    return { jobId: id, sandboxKey: call.binding.sandboxKey };
  }

  /**
   * Kills one job's process tree (nothing else in the sandbox); false when it had already ended.
   * Audited either way (who, which job, the outcome), a refused or failed kill with its code.
   */
  async kill(scope: CallScope, jobId: string): Promise<{ killed: boolean }> {
    const startedMs = Date.now();
    let sandboxKey: string | null = null;
    try {
      const job = this.opts.ledger.find(scope, jobId);
      sandboxKey = job.sandboxKey;
      const r = await this.killFound(job);
      this.opts.audit.record({ kind: 'kill', scope, jobId, sandboxKey, outcome: r, startedMs });
      return r;
    } catch (err) {
      const errorCode = err instanceof BerthError ? err.code : 'internal';
      this.opts.audit.record({ kind: 'kill', scope, jobId: String(jobId), sandboxKey, outcome: { errorCode }, startedMs });
      throw err;
    }
  }

  private async killFound(job: JobRecord): Promise<{ killed: boolean }> {
    const { ledger, sandboxes, killer } = this.opts;
    if (job.status !== 'running') return { killed: false };
    const call = ledger.callOf(job);
    const sandbox = await sandboxes.existing(call, job.digest).catch(() => undefined);
    if (sandbox === undefined) {
      ledger.settle(job, 'unknown', null);
      return { killed: false };
    }
    return { killed: await killer.kill(job, sandbox) };
  }

  /** The session's jobs, oldest first; running ones are checked with their sandbox. */
  async list(scope: CallScope): Promise<JobSummary[]> {
    const jobs = this.opts.jobs.list(scope.tenant, scope.profile, sessionRefOf(scope), scope.user ?? null);
    const out: JobSummary[] = [];
    for (const job of jobs) {
      let status: string = job.status;
      let exitCode = job.exitCode;
      if (job.status === 'running') {
        const r = await this.opts.reader.read(scope, job.id, { offset: 0, maxBytes: 0 });
        status = r.status;
        exitCode = r.exitCode;
      }
      out.push({ jobId: job.id, command: job.command, status, exitCode, startedMs: job.startedMs });
    }
    return out;
  }

  /**
   * A tenant's latest jobs of `profiles`, newest first, each with the scope that reads or kills
   * it (the dashboard's view, across the tenant's sessions). Running ones are checked with their
   * sandbox; one that cannot be checked shows as last recorded.
   */
  async ofTenant(tenant: string, profiles: readonly string[], limit: number): Promise<TenantJob[]> {
    const out: TenantJob[] = [];
    for (const job of this.opts.jobs.ofTenant(tenant, profiles, limit)) {
      const scope = apiScopeOf(job);
      let status: string = job.status;
      let exitCode = job.exitCode;
      if (job.status === 'running' && scope !== undefined) {
        const r = await this.opts.reader.read({ ...scope, tenant }, job.id, { offset: 0, maxBytes: 0 }).catch(() => undefined);
        if (r !== undefined) ({ status, exitCode } = r);
      }
      out.push({
        jobId: job.id, command: job.command, status, exitCode, startedMs: job.startedMs, sandboxKey: job.sandboxKey,
        scope: scope ?? { profile: job.profile },
      });
    }
    return out;
  }
}

/** What a job keeps of its call's scope: the fields that find its session again (not the token it came with). */
function storedScope(s: CallScope): CallScope {
  const { workspace: _workspace, parentTask: _parent, token: _token, ...rest } = s;
  return rest;
}

/** The API scope of a job from its stored scope; undefined when that record is unreadable. */
function apiScopeOf(job: JobRecord): JobScope | undefined {
  try {
    const stored = JSON.parse(job.scope) as Partial<Record<keyof JobScope, unknown>>;
    const scope: JobScope = { profile: job.profile };
    for (const k of ['session', 'task', 'user'] as const) {
      const v = stored[k];
      if (typeof v === 'string') scope[k] = v;
    }
    return scope;
  } catch {
    return undefined;
  }
}
