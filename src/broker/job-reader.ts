import type { Sandbox } from '../backends/backend.js';
import type { SecretsFile } from '../policy/secrets-file.js';
import { settingsFor } from '../config/types.js';
import type { BerthConfig } from '../setup/berth-config.js';
import { BerthError, PolicyRefusedError, UsageError } from '../errors.js';
import { lookBackBytes, redactWindow } from '../kit/redaction.js';
import { resolveEnvGrants } from '../policy/env-grants.js';
import type { CallScope } from '../scope/call-scope.js';
import type { JobLedger, JobStatus } from './job-ledger.js';
import type { JobProbe } from './job-probe.js';
import type { ResolvedCall } from './resolve-call.js';

const DEFAULT_READ_BYTES = 64 * 1024;
/** Cap per read: the output travels as one JSON string. */
const MAX_READ_BYTES = 1024 * 1024;

export interface JobReadResult {
  output: string;
  nextOffset: number;
  /** The job ended and no output is left past `nextOffset`. */
  done: boolean;
  exitCode: number | null;
  status: JobStatus;
}

/** What the reader asks of the sandbox pool: a job's sandbox if it still exists, never a new one. */
export interface SandboxFinder {
  existing(call: ResolvedCall | undefined, digest: string): Promise<Sandbox | undefined>;
}

/** What the reader asks of the call resolver: a reader's call, and the sources secrets come from. */
export interface SecretSources {
  resolve(scope: CallScope): ResolvedCall;
  policy(): { config: BerthConfig; hostEnv: Readonly<Record<string, string | undefined>>; secrets: ReadonlyMap<string, SecretsFile> };
}

export interface JobReaderOptions {
  ledger: Pick<JobLedger, 'find' | 'callOf' | 'settle' | 'settleGone'>;
  probe: Pick<JobProbe, 'probe'>;
  sandboxes: SandboxFinder;
  resolver: SecretSources;
}

/**
 * A job's output from a byte offset and its status, as its sandbox says. When the sandbox is gone
 * the job's end is `unknown`, never an invented exit code. Output is redacted with the reader's own
 * secrets (and the starting call's, when it still resolves), never returned unredacted.
 */
export class JobReader {
  constructor(private readonly opts: JobReaderOptions) {}

  async read(scope: CallScope, jobId: string, opts: { offset?: number; maxBytes?: number } = {}): Promise<JobReadResult> {
    const { ledger, probe, sandboxes } = this.opts;
    const job = ledger.find(scope, jobId);
    const offset = opts.offset ?? 0;
    const maxBytes = Math.min(opts.maxBytes ?? DEFAULT_READ_BYTES, MAX_READ_BYTES);
    if (!Number.isSafeInteger(offset) || offset < 0) throw new UsageError(`offset must be a whole number of bytes >= 0, got ${String(offset)}`);
    if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) throw new UsageError(`maxBytes must be a whole number >= 0, got ${String(opts.maxBytes)}`);
    const call = ledger.callOf(job);
    // Redaction with the reader's own secrets plus the starting call's (the same user's, see `find`);
    // undefined when neither resolves, and then no output leaves (below).
    const secrets = maxBytes > 0 ? this.redactValuesFor(scope, call) : [];
    // The window reaches (longest secret - 1) bytes before the offset and past the requested end, so a
    // secret around either edge is found whole: an offset inside one returns none of its bytes.
    const edge = lookBackBytes(secrets ?? []);
    const from = Math.max(0, offset - edge);
    const sandbox = await sandboxes.existing(call, job.digest);
    const state = sandbox === undefined ? undefined : await probe.probe(job, sandbox, from, maxBytes === 0 ? 0 : (offset - from) + maxBytes + edge);
    if (state === undefined) {
      // The sandbox (or the job's files) vanished. An end observed before is still the truth.
      const ended = ledger.settleGone(job);
      return { output: '', nextOffset: offset, done: ended.status !== 'running', exitCode: ended.exitCode, status: ended.status };
    }
    if (offset > state.size) {
      // An offset no read handed out: answering it as valid would hide a client's bookkeeping bug.
      throw new BerthError('offset_out_of_range',
        `offset ${offset} is past the end of job ${job.id}'s output (${state.size} bytes so far); read from an offset up to ${state.size}, e.g. the nextOffset of the previous read`);
    }
    let status: JobStatus;
    let exitCode: number | null = null;
    if (state.exitCode !== null) {
      ({ status, exitCode } = ledger.settle(job, 'exited', state.exitCode));
    } else if (state.alive) {
      status = 'running';
    } else {
      // Not running and no exit code: killed by us (a kill under way records it), or its processes died with the sandbox (restart).
      ({ status, exitCode } = ledger.settleGone(job));
    }
    const ended = status !== 'running';
    if (secrets === undefined && state.bytes.length > offset - from) {
      throw new PolicyRefusedError(
        `the output of job ${job.id} cannot be redacted: neither the call that started it nor yours resolves under ` +
          'the current config, so berth does not return it; restore the profile\'s config or read it with a scope that resolves',
      );
    }
    // More may come: never split a UTF-8 character or a secret across two reads.
    const more = !ended || from + state.bytes.length < state.size;
    const { text, end } = redactWindow(state.bytes, offset - from, maxBytes, secrets ?? [], more);
    const nextOffset = from + end;
    return { output: text, nextOffset, done: ended && nextOffset >= state.size, exitCode, status };
  }

  /**
   * Values to redact from a job's output for this reader: the reader's own (its call's, and every
   * secret its profile grants its user in any sandbox: the job's sandbox may be one its call no
   * longer resolves to), plus the starting call's when it still resolves. Undefined when none of
   * these resolves: then no output may leave.
   */
  private redactValuesFor(scope: CallScope, call: ResolvedCall | undefined): string[] | undefined {
    const { resolver } = this.opts;
    const sources: Array<() => readonly string[]> = [
      () => resolver.resolve(scope).redactValues,
      () => {
        const { config, hostEnv, secrets } = resolver.policy();
        const { env } = settingsFor(config, scope.profile);
        const file = env.secretsFile === undefined ? undefined : secrets.get(env.secretsFile);
        if (env.secretsFile !== undefined && file === undefined) throw new Error(`secrets file ${env.secretsFile} not read`);
        return resolveEnvGrants({ env, tenant: scope.tenant, user: scope.user, hostEnv, secrets: file }).redactValues;
      },
    ];
    if (call !== undefined) sources.push(() => call.redactValues);
    const values = new Set<string>();
    let resolved = false;
    for (const source of sources) {
      try {
        for (const v of source()) values.add(v);
        resolved = true;
      } catch {
        // another source may still resolve
      }
    }
    return resolved ? [...values] : undefined;
  }
}
