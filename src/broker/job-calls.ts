import type { CallScopeInput } from '../scope/call-scope.js';
import type { CallResolver } from './call-resolver.js';
import type { JobReader, JobReadResult } from './job-reader.js';
import type { JobRunner, JobSummary, TenantJob } from './job-runner.js';

/**
 * Background jobs of a call's session (`broker.jobs`; bound to a scope as `session.jobs`): a job
 * outlives the request that started it, and its output stays in the sandbox until read.
 *
 * @example
 * const { jobId } = await broker.jobs.start({ session: 's1' }, 'npm test');
 * const r = await broker.jobs.read({ session: 's1' }, jobId, { offset: 0 }); // r.output, r.nextOffset, r.done
 */
export class BrokerJobs {
  constructor(private readonly opts: {
    resolver: Pick<CallResolver, 'resolve' | 'normalize'>;
    runner: Pick<JobRunner, 'start' | 'kill' | 'list' | 'ofTenant'>;
    reader: Pick<JobReader, 'read'>;
    /** Throws once the broker is shutting down. */
    lifecycle: { assertOpen(): void };
  }) {}

  /** Starts `command` as a background job in the call's sandbox; resolves once the job runs. */
  start(scope: CallScopeInput, command: string, opts: { workdir?: string } = {}): Promise<{ jobId: string; sandboxKey: string }> {
    this.opts.lifecycle.assertOpen();
    return this.opts.runner.start(this.opts.resolver.resolve(scope), command, opts);
  }

  /** Output of a job of the call's session from a byte offset, and its status (exit code once done). */
  read(scope: CallScopeInput, jobId: string, opts: { offset?: number; maxBytes?: number } = {}): Promise<JobReadResult> {
    this.opts.lifecycle.assertOpen();
    return this.opts.reader.read(this.opts.resolver.normalize(scope), jobId, opts);
  }

  /** Kills one job's process tree (nothing else in the sandbox); false when it had already ended. */
  kill(scope: CallScopeInput, jobId: string): Promise<{ killed: boolean }> {
    this.opts.lifecycle.assertOpen();
    return this.opts.runner.kill(this.opts.resolver.normalize(scope), jobId);
  }

  /** The jobs of the call's session, oldest first. */
  list(scope: CallScopeInput): Promise<JobSummary[]> {
    this.opts.lifecycle.assertOpen();
    return this.opts.runner.list(this.opts.resolver.normalize(scope));
  }

  /**
   * A tenant's latest jobs (of `profiles` only), newest first, with the scope of each: the
   * dashboard's view across the tenant's sessions. The caller decides whose tenant this is.
   */
  ofTenant(tenant: string, profiles: readonly string[], limit = 50): Promise<TenantJob[]> {
    this.opts.lifecycle.assertOpen();
    return this.opts.runner.ofTenant(tenant, profiles, limit);
  }
}
