import type { CallScopeInput } from '../scope/call-scope.js';
import type { BrokerExecResult, ExecOptions } from './broker-types.js';
import type { BrokerFiles } from './file-calls.js';
import type { BrokerJobs } from './job-calls.js';
import type { JobReadResult } from './job-reader.js';
import type { JobSummary } from './job-runner.js';
import type { Binding } from './resolve-call.js';
import type { CloseResult } from './session-close.js';
import { SessionSnapshots } from './session-snapshots.js';
import type { SnapshotCalls } from './snapshot-calls.js';
import type { ForkResult } from './snapshot-info.js';

/** What a session handle needs of its broker. */
export interface SessionHost {
  exec(scope: CallScopeInput, command: string, opts?: ExecOptions): Promise<BrokerExecResult>;
  explain(scope: CallScopeInput): Binding;
  closeSession(scope: CallScopeInput): Promise<CloseResult>;
  readonly files: BrokerFiles;
  readonly jobs: BrokerJobs;
  readonly snapshots: SnapshotCalls;
}

/** `broker.files` bound to one scope (see `BrokerFiles` for each call). */
export class SessionFiles {
  constructor(private readonly files: BrokerFiles, private readonly scope: CallScopeInput) {}

  upload(a: { path: string; data: Buffer; mode?: number }): Promise<{ path: string; bytes: number }> {
    return this.files.upload(this.scope, a);
  }

  uploadStream(a: { path: string; size: number; stream: AsyncIterable<Uint8Array>; mode?: number }): Promise<{ path: string; bytes: number }> {
    return this.files.uploadStream(this.scope, a);
  }

  uploadTar(a: { dir: string; tar: Buffer }): Promise<{ dir: string; entries: number }> {
    return this.files.uploadTar(this.scope, a);
  }

  readFile(a: { path: string; maxBytes?: number }): Promise<{ path: string; data: Buffer }> {
    return this.files.readFile(this.scope, a);
  }

  exportPath(a: { path: string; maxBytes?: number }): Promise<{ hostPath: string; bytes: number; kind: 'file' | 'dir' }> {
    return this.files.exportPath(this.scope, a);
  }

  mediaPath(sandboxPath: string): Promise<{ hostPath: string; exported: boolean }> {
    return this.files.mediaPath(this.scope, sandboxPath);
  }
}

/** `broker.jobs` bound to one scope (see `BrokerJobs` for each call). */
export class SessionJobs {
  constructor(private readonly jobs: BrokerJobs, private readonly scope: CallScopeInput) {}

  start(command: string, opts?: { workdir?: string }): Promise<{ jobId: string; sandboxKey: string }> {
    return this.jobs.start(this.scope, command, opts);
  }

  read(jobId: string, opts?: { offset?: number; maxBytes?: number }): Promise<JobReadResult> {
    return this.jobs.read(this.scope, jobId, opts);
  }

  kill(jobId: string): Promise<{ killed: boolean }> {
    return this.jobs.kill(this.scope, jobId);
  }

  list(): Promise<JobSummary[]> {
    return this.jobs.list(this.scope);
  }
}

/**
 * A call scope bound to a broker: what an agent framework holds per conversation. Commands,
 * files and jobs all go to the scope's sandbox. `close()` ends the session (ephemeral sandboxes
 * go away; persistent ones stay).
 *
 * @example
 * ```ts
 * await using chat = broker.session({ tenant: 'acme', session: 'chat-42' });
 * await chat.files.upload({ path: 'data.csv', data: Buffer.from('a,b\n') });
 * const { jobId } = await chat.jobs.start('npm test');
 * const r = await chat.exec('wc -l data.csv');
 * ```
 */
export class SessionHandle implements AsyncDisposable {
  /** Files in and out of the session's sandbox. */
  readonly files: SessionFiles;
  /** Background jobs of the session. */
  readonly jobs: SessionJobs;
  /** Snapshots of the session's sandbox, and restoring one. */
  readonly snapshots: SessionSnapshots;

  constructor(private readonly broker: SessionHost, readonly scope: CallScopeInput) {
    this.files = new SessionFiles(broker.files, scope);
    this.jobs = new SessionJobs(broker.jobs, scope);
    this.snapshots = new SessionSnapshots(broker.snapshots, scope);
  }

  exec(command: string, opts?: ExecOptions): Promise<BrokerExecResult> {
    return this.broker.exec(this.scope, command, opts);
  }

  explain(): Binding {
    return this.broker.explain(this.scope);
  }

  /**
   * A new session `toSession` whose sandbox starts from this one's current state (or from its
   * snapshot `from`), its shell in this shell's cwd with its variables; a handle on it follows
   * with `broker.session({ ...scope, session: toSession })`.
   */
  fork(a: { toSession: string; from?: string }): Promise<ForkResult> {
    return this.broker.snapshots.fork(this.scope, a);
  }

  close(): Promise<CloseResult> {
    return this.broker.closeSession(this.scope);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
