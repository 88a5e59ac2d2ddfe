import { randomBytes } from 'node:crypto';
import type { Sandbox } from '../backends/backend.js';
import type { SecretsFile } from '../config/secrets-file.js';
import { settingsFor, type BerthConfig } from '../config/types.js';
import { BerthError, PolicyRefusedError, SandboxNotFoundError, UsageError } from '../errors.js';
import type { CallScope } from '../scope/call-scope.js';
import { resolveEnvGrants } from '../policy/env-grants.js';
import { KILL_TREE_SCRIPT } from '../shell/kill-tree.js';
import { lookBackBytes, redactText, redactWindow } from '../kit/redaction.js';
import { TAG_VAR } from '../shell/protocol.js';
import { sessionRefOf, type ResolvedCall } from './resolve-call.js';
import type { JobRecord } from './state/job-table.js';
import type { StateStore } from './state/state-store.js';

/*
 * Background jobs. A job is a detached process tree inside the call's sandbox, started
 * through the call's persistent shell (so it gets the shell's cwd, exported env and granted
 * secrets, which travel through the API env as for any command, never on argv). Everything about
 * the job lives in the sandbox under `<stateDir>/jobs/<id>/`:
 *   cmd   the command line (written from the command's stdin, so it is on no argv either)
 *   out   stdout and stderr interleaved, read from a byte offset
 *   pid   the wrapper's pid, written before `jobs.start` returns
 *   exit  the exit code, written atomically once the command ended
 * Every process of the job carries `BERTH_CMD_TAG=job-<id>` in its environment, so a kill finds
 * the whole tree (also what escaped with setsid) and nothing else: the kill-tree helper of the
 * shell protocol, aimed at the job's wrapper. Where the sandbox has the kernel's grouping, the
 * start line runs in a process group named after the job (`jobGroup`), which keeps the job once
 * the line ends: the kill ends that group first, so what shed the tag with `env -i` ends too. The state store only indexes jobs by tenant, session
 * and end user (a job is seen, read and killed only by calls of the same user, or of no user when it
 * was started with none); the truth about a job is what its sandbox says, and when the sandbox is
 * gone the job's end is `unknown`, never an invented exit code. Output is redacted with the reader's
 * own secrets (and the starting call's, when it still resolves), never returned unredacted.
 */

export type JobStatus = JobRecord['status'];

export interface JobReadResult {
  output: string;
  nextOffset: number;
  /** The job ended and no output is left past `nextOffset`. */
  done: boolean;
  exitCode: number | null;
  status: JobStatus;
}

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

/** What the job runner needs from the broker; the broker owns sandboxes and shells. */
export interface JobHost {
  store: StateStore;
  /** Resolve a (stored, normalised) scope to a call. */
  resolve(scope: CallScope): ResolvedCall;
  /** The config and secret sources calls resolve against (for the secrets a reader's user may hold). */
  policy(): { config: BerthConfig; hostEnv: Readonly<Record<string, string | undefined>>; secrets: ReadonlyMap<string, SecretsFile> };
  /** The call's sandbox, created or reattached as for a command. */
  sandboxFor(call: ResolvedCall): Promise<Sandbox>;
  /**
   * Run one line through the call's persistent shell (as `exec` does, without an audit entry);
   * `group` names the process group it runs in (see `RunOptions.group`).
   */
  run(call: ResolvedCall, line: string, opts: { workdir?: string; stdin: string; group?: string }): Promise<{ exitCode: number; output: string }>;
  /**
   * The sandbox of `digest` if it still exists: the live one, or the recorded one reattached
   * through `call`. Never creates one: a vanished sandbox is `undefined`.
   */
  existingSandbox(call: ResolvedCall | undefined, digest: string): Promise<Sandbox | undefined>;
  /** Records the start in the audit log (`command` as given: the audit redacts it with the call's secrets). */
  audit(call: ResolvedCall, command: string, startedMs: number): void;
  log(message: string): void;
}

const DEFAULT_READ_BYTES = 64 * 1024;
/** Cap per read: the output travels as one JSON string. */
export const MAX_READ_BYTES = 1024 * 1024;
const HELPER_TIMEOUT_MS = 15_000;
/** How long the start line waits for the wrapper to record its pid. */
const PID_WAIT_TENTHS = 50;
const JOB_ID_RE = /^job_[0-9a-f]{16}$/;

/**
 * Starts the wrapper fully detached (`( ... & )` reparents it to init, `setsid` gives it its own
 * session) with no fd on the shell's pipes, then waits for its pid file so a read right after the
 * start never sees a job with no pid. `$0` of the wrapper is the job dir.
 */
function startLine(dir: string, tag: string): string {
  const wrapper = 'd=$0; echo $$ > "$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid"; bash "$d/cmd" < /dev/null > "$d/out" 2>&1; ' +
    'c=$?; echo "$c" > "$d/exit.tmp"; mv "$d/exit.tmp" "$d/exit"';
  // One compound command and no `exit`: this runs in the persistent shell itself.
  return `if mkdir -p ${dir} && cat > ${dir}/cmd && : > ${dir}/out; then ` +
    `( ${TAG_VAR}=${tag} setsid bash -c '${wrapper}' ${dir} < /dev/null > /dev/null 2>&1 & ); ` +
    `__bj=0; while [ ! -s ${dir}/pid ] && [ "$__bj" -lt ${PID_WAIT_TENTHS * 10} ]; do sleep 0.01; __bj=$((__bj + 1)); done; unset __bj; ` +
    `[ -s ${dir}/pid ]; else false; fi`;
}

/**
 * Status and output in one helper run: a header line `ok <exit|-> <alive 0|1> <size>` (or
 * `missing`), then up to `max` bytes of output from `off`. The exit file is read before the
 * output, so once it is there the bytes read after it are complete.
 */
const READ_SCRIPT = `
d=$1; off=$2; max=$3; tag=$4
[ -d "$d" ] || { echo missing; exit 0; }
code=; [ -f "$d/exit" ] && read -r code < "$d/exit"
alive=0
if [ -z "$code" ] && [ -f "$d/pid" ]; then
  read -r p < "$d/pid"
  grep -z -x -q -s -F "${TAG_VAR}=$tag" "/proc/$p/environ" 2>/dev/null && alive=1
  # The wrapper records the exit before it ends: one that ended since the first look left it.
  [ "$alive" = 0 ] && [ -f "$d/exit" ] && read -r code < "$d/exit"
fi
size=$(wc -c < "$d/out" 2>/dev/null) || size=0
echo "ok \${code:--} $alive $size"
if [ "$max" -gt 0 ]; then tail -c +$((off + 1)) "$d/out" 2>/dev/null | head -c "$max"; fi
exit 0
`;

/**
 * Kills the wrapper first (so it cannot record an exit code for a killed job), then runs the
 * shell protocol's kill-tree helper aimed at the dead wrapper: every process carrying the job's
 * tag, their descendants and their process groups. A pid that cannot exist stands in when the
 * wrapper never recorded one, so the helper's "children of the shell" rule matches nothing.
 */
const KILL_PRELUDE = `
jd=$1; tag=$2
p=4194304
if [ -f "$jd/pid" ]; then read -r p < "$jd/pid"; fi
if grep -z -x -q -s -F "${TAG_VAR}=$tag" "/proc/$p/environ" 2>/dev/null; then kill -KILL "$p" 2>/dev/null; fi
set -- "$p" "$tag"
`;

/** Background jobs of one broker: start, read from an offset, kill, list, activity for the idle reaper. */
export class JobRunner {
  constructor(private readonly host: JobHost) {}

  async start(call: ResolvedCall, command: string, opts: { workdir?: string } = {}): Promise<{ jobId: string; sandboxKey: string }> {
    if (typeof command !== 'string' || command.trim() === '') throw new UsageError('a job needs a command, e.g. "npm run build"');
    if (command.includes('\0')) throw new UsageError('the command contains a NUL byte; bash cannot run it');
    const started = Date.now();
    const sandbox = await this.host.sandboxFor(call);
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
    this.host.store.jobs.put(record);
    let r: { exitCode: number; output: string };
    try {
      r = await this.host.run(call, startLine(dir, tagOf(id)), { workdir: opts.workdir, stdin: command, group: jobGroup(id) });
    } catch (err) {
      this.host.store.jobs.delete(id);
      throw err;
    }
    if (r.exitCode !== 0) {
      this.host.store.jobs.delete(id);
      const why = r.output.trim().split('\n').slice(-3).join('; ');
      throw new BerthError('job_start_failed', `the job could not be started in sandbox "${call.binding.sandboxKey}" (exit ${r.exitCode})${why ? `: ${why}` : ''}`);
    }
    this.host.audit(call, command, started);
    return { jobId: id, sandboxKey: call.binding.sandboxKey };
  }

  async read(scope: CallScope, jobId: string, opts: { offset?: number; maxBytes?: number } = {}): Promise<JobReadResult> {
    const job = this.find(scope, jobId);
    const offset = opts.offset ?? 0;
    const maxBytes = Math.min(opts.maxBytes ?? DEFAULT_READ_BYTES, MAX_READ_BYTES);
    if (!Number.isSafeInteger(offset) || offset < 0) throw new UsageError(`offset must be a whole number of bytes >= 0, got ${String(offset)}`);
    if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) throw new UsageError(`maxBytes must be a whole number >= 0, got ${String(opts.maxBytes)}`);
    const call = this.callOf(job);
    // Redaction with the reader's own secrets plus the starting call's (the same user's, see `find`);
    // undefined when neither resolves, and then no output leaves (below).
    const secrets = maxBytes > 0 ? this.redactValuesFor(scope, call) : [];
    // The window reaches (longest secret - 1) bytes before the offset and past the requested end, so a
    // secret around either edge is found whole: an offset inside one returns none of its bytes.
    const edge = lookBackBytes(secrets ?? []);
    const from = Math.max(0, offset - edge);
    const probe = await this.probe(job, call, from, maxBytes === 0 ? 0 : (offset - from) + maxBytes + edge);
    if (probe === undefined) {
      // The sandbox (or the job's files) vanished. An end observed before is still the truth.
      const ended = this.settle(job, 'unknown', null);
      return { output: '', nextOffset: offset, done: true, exitCode: ended.exitCode, status: ended.status };
    }
    if (offset > probe.size) {
      // An offset no read handed out: answering it as valid would hide a client's bookkeeping bug.
      throw new BerthError('offset_out_of_range',
        `offset ${offset} is past the end of job ${job.id}'s output (${probe.size} bytes so far); read from an offset up to ${probe.size}, e.g. the nextOffset of the previous read`);
    }
    let status: JobStatus;
    let exitCode: number | null = null;
    if (probe.exitCode !== null) {
      ({ status, exitCode } = this.settle(job, 'exited', probe.exitCode));
    } else if (probe.alive) {
      status = 'running';
    } else {
      // Not running and no exit code: killed by us, or its processes died with the sandbox (restart).
      ({ status, exitCode } = this.settle(job, 'unknown', null));
    }
    const ended = status !== 'running';
    if (secrets === undefined && probe.bytes.length > offset - from) {
      throw new PolicyRefusedError(
        `the output of job ${job.id} cannot be redacted: neither the call that started it nor yours resolves under ` +
          'the current config, so berth does not return it; restore the profile\'s config or read it with a scope that resolves',
      );
    }
    // More may come: never split a UTF-8 character or a secret across two reads.
    const more = !ended || from + probe.bytes.length < probe.size;
    const { text, end } = redactWindow(probe.bytes, offset - from, maxBytes, secrets ?? [], more);
    const nextOffset = from + end;
    return { output: text, nextOffset, done: ended && nextOffset >= probe.size, exitCode, status };
  }

  async kill(scope: CallScope, jobId: string): Promise<{ killed: boolean }> {
    const job = this.find(scope, jobId);
    if (job.status !== 'running') return { killed: false };
    const call = this.callOf(job);
    const sandbox = await this.host.existingSandbox(call, job.digest).catch(() => undefined);
    if (sandbox === undefined) {
      this.settle(job, 'unknown', null);
      return { killed: false };
    }
    // Its group goes first where the sandbox has one: the look below starts a process in the
    // sandbox, and the job may have left it no pid (a fork bomb).
    const grouped = await this.endGroup(job, sandbox);
    const state = await this.probe(job, call, 0, 0, sandbox);
    if (state !== undefined && state.exitCode !== null) {
      this.settle(job, 'exited', state.exitCode);
      return { killed: false };
    }
    if (grouped === undefined && (state === undefined || !state.alive)) {
      this.settle(job, 'unknown', null);
      return { killed: false };
    }
    return { killed: await this.killIn(job, sandbox, call) };
  }

  /**
   * Ends the job's process group, where the sandbox has the kernel's grouping: how many processes
   * it held, or undefined when there is none (no grouping, the group is gone, or it failed: logged).
   */
  private async endGroup(job: JobRecord, sandbox: Sandbox): Promise<number | undefined> {
    try {
      const killed = await sandbox.processGroups?.killGroup(jobGroup(job.id));
      if (killed !== undefined) this.host.log(`job ${job.id} in ${job.sandboxKey}: killed ${killed} process(es) of its group`);
      return killed;
    } catch (err) {
      this.host.log(`job ${job.id} in ${job.sandboxKey}: its process group could not be killed (${String(err)}); killing by its tag`);
      return undefined;
    }
  }

  /**
   * Kills the job's tree: its process group whole where the sandbox has one, then what the tags
   * find; false when it had ended on its own just before (its exit code is then recorded).
   */
  private async killIn(job: JobRecord, sandbox: Sandbox, call: ResolvedCall | undefined): Promise<boolean> {
    await this.endGroup(job, sandbox);
    // The helper's variables never clash with `jd`; the last line says whether the job had ended first.
    const script = `${KILL_PRELUDE}\n${KILL_TREE_SCRIPT}\n[ -f "$jd/exit" ] && echo exited\nexit 0\n`;
    const r = await sandbox.execOnce(['sh', '-c', script, 'sh', job.dir, tagOf(job.id)], { timeoutMs: HELPER_TIMEOUT_MS });
    const lines = r.stdout.toString('utf8').trim().split('\n');
    this.host.log(`job ${job.id} in ${job.sandboxKey}: killed ${lines[0] || '0'} process(es) of its tree`);
    if (lines.includes('exited')) {
      const after = await this.probe(job, call, 0, 0, sandbox);
      this.settle(job, after?.exitCode != null ? 'exited' : 'unknown', after?.exitCode ?? null);
      return false;
    }
    this.host.store.jobs.end(job.id, 'killed', null, Date.now());
    return true;
  }

  /** The session's jobs, oldest first; running ones are checked with their sandbox. */
  async list(scope: CallScope): Promise<JobSummary[]> {
    const jobs = this.host.store.jobs.list(scope.tenant, scope.profile, sessionRefOf(scope), scope.user ?? null);
    const out: JobSummary[] = [];
    for (const job of jobs) {
      let status: string = job.status;
      let exitCode = job.exitCode;
      if (job.status === 'running') {
        const r = await this.read(scope, job.id, { offset: 0, maxBytes: 0 });
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
    for (const job of this.host.store.jobs.ofTenant(tenant, profiles, limit)) {
      const scope = apiScopeOf(job);
      let status: string = job.status;
      let exitCode = job.exitCode;
      if (job.status === 'running' && scope !== undefined) {
        const r = await this.read({ ...scope, tenant }, job.id, { offset: 0, maxBytes: 0 }).catch(() => undefined);
        if (r !== undefined) ({ status, exitCode } = r);
      }
      out.push({
        jobId: job.id, command: job.command, status, exitCode, startedMs: job.startedMs, sandboxKey: job.sandboxKey,
        scope: scope ?? { profile: job.profile },
      });
    }
    return out;
  }

  /**
   * Whether a job still runs in this sandbox (idle reaper): jobs recorded as running are checked
   * in the sandbox, and their end is recorded when it is seen.
   */
  async activeIn(digest: string, sandbox: Sandbox): Promise<boolean> {
    let active = false;
    for (const job of this.host.store.jobs.runningIn(digest)) {
      const p = await this.probe(job, undefined, 0, 0, sandbox).catch(() => 'error' as const);
      if (p === 'error') {
        active = true; // cannot tell: do not reap on a guess
      } else if (p === undefined) {
        this.settle(job, 'unknown', null);
      } else if (p.exitCode !== null) {
        this.settle(job, 'exited', p.exitCode);
      } else if (p.alive) {
        active = true;
      } else {
        this.settle(job, 'unknown', null);
      }
    }
    return active;
  }

  /** Kills every running job of a sandbox that is about to be removed (host backends: a dir takes no process with it). */
  async killAllIn(digest: string, sandbox: Sandbox): Promise<void> {
    for (const job of this.host.store.jobs.runningIn(digest)) {
      await this.killIn(job, sandbox, undefined);
    }
  }

  /** A job of the caller's session and user; another user's job is not found, exactly like an unknown id. */
  private find(scope: CallScope, jobId: string): JobRecord {
    const job = typeof jobId === 'string' && JOB_ID_RE.test(jobId)
      ? this.host.store.jobs.get(scope.tenant, scope.profile, sessionRefOf(scope), scope.user ?? null, jobId)
      : undefined;
    if (job === undefined) {
      throw new BerthError('job_not_found', `no job ${JSON.stringify(String(jobId))} in this session; list the session's jobs to see their ids`);
    }
    return job;
  }

  /** The call that started the job, resolved again (its sandbox may need reattaching); undefined if policy changed. */
  private callOf(job: JobRecord): ResolvedCall | undefined {
    try {
      const stored = JSON.parse(job.scope) as CallScope;
      // The stored scope is the job's user's by construction; anything else is never resolved.
      if ((stored.user ?? null) !== job.user) return undefined;
      const call = this.host.resolve(stored);
      return call.spec.digest === job.digest ? call : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * Values to redact from a job's output for this reader: the reader's own (its call's, and every
   * secret its profile grants its user in any sandbox: the job's sandbox may be one its call no
   * longer resolves to), plus the starting call's when it still resolves. Undefined when none of
   * these resolves: then no output may leave.
   */
  private redactValuesFor(scope: CallScope, call: ResolvedCall | undefined): string[] | undefined {
    const sources: Array<() => readonly string[]> = [
      () => this.host.resolve(scope).redactValues,
      () => {
        const { config, hostEnv, secrets } = this.host.policy();
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

  /** The job's state as its sandbox reports it; undefined when the sandbox or the job's dir is gone. */
  private async probe(job: JobRecord, call: ResolvedCall | undefined, offset: number, maxBytes: number, known?: Sandbox): Promise<
    { exitCode: number | null; alive: boolean; size: number; bytes: Buffer } | undefined
  > {
    const sandbox = known ?? await this.host.existingSandbox(call, job.digest);
    if (sandbox === undefined) return undefined;
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

  /** Records an end unless one was recorded before; returns the recorded truth (killed stays killed). */
  private settle(job: JobRecord, status: 'exited' | 'unknown', exitCode: number | null): { status: JobStatus; exitCode: number | null } {
    if (job.status !== 'running') return { status: job.status, exitCode: job.exitCode };
    const fresh = this.host.store.jobs.get(job.tenant, job.profile, job.session, job.user, job.id);
    if (fresh !== undefined && fresh.status !== 'running') return { status: fresh.status, exitCode: fresh.exitCode };
    this.host.store.jobs.end(job.id, status, exitCode, Date.now());
    return { status, exitCode };
  }
}

function tagOf(id: string): string {
  return `job-${id.slice('job_'.length)}`;
}

/** The name of the process group a job runs in (where the sandbox has the kernel's grouping). */
function jobGroup(id: string): string {
  return tagOf(id);
}

function storedScope(s: CallScope): CallScope {
  const { workspace: _workspace, parentTask: _parent, ...rest } = s;
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
