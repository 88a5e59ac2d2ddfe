import type { Sandbox } from '../backends/backend.js';
import type { JobLedger } from './job-ledger.js';
import { HELPER_TIMEOUT_MS, type JobProbe } from './job-probe.js';
import { jobGroup, KILL_SCRIPT, tagOf } from './job-scripts.js';
import type { JobRecord, JobTable } from './state/job-table.js';
import type { Logger } from '../logging/logger.js';

export interface JobKillerOptions {
  jobs: Pick<JobTable, 'runningIn' | 'endKilled' | 'markKilling' | 'clearKilling'>;
  ledger: Pick<JobLedger, 'settle'>;
  probe: Pick<JobProbe, 'probe'>;
  log: Logger;
}

/**
 * Ends a job's process tree in its sandbox, and nothing else there: its process group whole where
 * the sandbox has the kernel's grouping, then every process its tag finds. Also every running job
 * of a sandbox about to be removed whose processes would outlive it (a host dir).
 */
export class JobKiller {
  constructor(private readonly opts: JobKillerOptions) {}

  /**
   * Kills a running job found in `sandbox`; false when it had ended on its own (its end is then
   * recorded) or nothing of it was left to kill.
   */
  async kill(job: JobRecord, sandbox: Sandbox): Promise<boolean> {
    const startedMs = Date.now();
    return this.marked(job, startedMs, () => this.killFound(job, sandbox, startedMs));
  }

  private async killFound(job: JobRecord, sandbox: Sandbox, startedMs: number): Promise<boolean> {
    const { ledger, probe } = this.opts;
    // Its group goes first where the sandbox has one: the look below starts a process in the
    // sandbox, and the job may have left it no pid (a fork bomb).
    const grouped = await this.endGroup(job, sandbox);
    const state = await probe.probe(job, sandbox, 0, 0);
    if (state !== undefined && state.exitCode !== null) {
      ledger.settle(job, 'exited', state.exitCode);
      return false;
    }
    if (grouped === undefined && (state === undefined || !state.alive)) {
      ledger.settle(job, 'unknown', null);
      return false;
    }
    return this.killIn(job, sandbox, startedMs);
  }

  /** Kills every running job of a sandbox that is about to be removed (host backends: a dir takes no process with it). */
  async killAllIn(digest: string, sandbox: Sandbox): Promise<void> {
    for (const job of this.opts.jobs.runningIn(digest)) {
      const startedMs = Date.now();
      await this.marked(job, startedMs, () => this.killIn(job, sandbox, startedMs));
    }
  }

  /**
   * Runs a kill with the job marked as being killed in the store (`JobLedger.settleGone`), the mark
   * cleared after however it went. A store that refuses the mark (a full disk, a lock held too
   * long) never stops the kill: readers may then answer `unknown` for its moment, as before marks.
   */
  private async marked<T>(job: JobRecord, startedMs: number, kill: () => Promise<T>): Promise<T> {
    const mark = (what: string, write: () => void): void => {
      try {
        write();
      } catch (err) {
        this.opts.log.warn(`job ${job.id} in ${job.sandboxKey}: could not ${what} in state.db (${String(err)}); the kill goes on`);
      }
    };
    mark('mark it as being killed', () => this.opts.jobs.markKilling(job.id, startedMs));
    try {
      return await kill();
    } finally {
      mark('clear its kill mark', () => this.opts.jobs.clearKilling(job.id));
    }
  }

  /**
   * Ends the job's process group, where the sandbox has the kernel's grouping: how many processes
   * it held, or undefined when there is none (no grouping, the group is gone, or it failed: logged).
   */
  private async endGroup(job: JobRecord, sandbox: Sandbox): Promise<number | undefined> {
    try {
      const killed = await sandbox.processGroups?.killGroup(jobGroup(job.id));
      if (killed !== undefined) this.opts.log.info(`job ${job.id} in ${job.sandboxKey}: killed ${killed} process(es) of its group`);
      return killed;
    } catch (err) {
      this.opts.log.warn(`job ${job.id} in ${job.sandboxKey}: its process group could not be killed (${String(err)}); killing by its tag`);
      return undefined;
    }
  }

  /**
   * Kills the job's tree: its process group whole where the sandbox has one, then what the tags
   * find; false when it had ended on its own just before (its exit code is then recorded).
   * `startedMs`: when this kill began (an end a reader recorded as unknown since then is its own).
   */
  private async killIn(job: JobRecord, sandbox: Sandbox, startedMs: number): Promise<boolean> {
    const { jobs, ledger, probe, log } = this.opts;
    await this.endGroup(job, sandbox);
    const r = await sandbox.execOnce(['sh', '-c', KILL_SCRIPT, 'sh', job.dir, tagOf(job.id)], { timeoutMs: HELPER_TIMEOUT_MS });
    const lines = r.stdout.toString('utf8').trim().split('\n');
    log.info(`job ${job.id} in ${job.sandboxKey}: killed ${lines[0] || '0'} process(es) of its tree`);
    if (lines.includes('exited')) {
      const after = await probe.probe(job, sandbox, 0, 0);
      ledger.settle(job, after?.exitCode != null ? 'exited' : 'unknown', after?.exitCode ?? null);
      return false;
    }
    jobs.endKilled(job.id, Date.now(), startedMs);
    return true;
  }
}
