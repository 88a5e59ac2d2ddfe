import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import type { Backend, ManagedSandbox, Sandbox } from '../backends/backend.js';
import { defaultBerthHome, loadConfig } from '../config/load.js';
import type { BackendName, BerthConfig } from '../config/types.js';
import { isContainerBackend, settingsFor } from '../config/types.js';
import { BerthError, isBerthError, PolicyRefusedError, SandboxNotFoundError, TimeoutError } from '../errors.js';
import { effectiveScope } from '../scope/async-context.js';
import type { CallScope, CallScopeInput } from '../scope/call-scope.js';
import { normalizeScope } from '../scope/normalize.js';
import { mapWorkdir } from '../policy/cwd.js';
import { assertAllowedRootsExist } from '../policy/allowed-roots.js';
import { assertVolumesAllowed } from '../policy/volumes.js';
import { redactText } from '../shell/output-capture.js';
import { PersistentShell } from '../shell/persistent-shell.js';
import type { ExecResult } from '../shell/types.js';
import { Warden } from '../shell/warden.js';
import { readSecretsFiles, type SecretsFile } from '../config/secrets-file.js';
import { ensurePrivateDir, removeSessionStaging, stagingDirFor } from '../files/staging.js';
import { StagingLedger } from '../files/staging-quota.js';
import { exportToStaging, mediaHostPath, readSandboxFile, uploadFile, uploadStream as uploadFileStream, uploadTarball, type TransferContext } from '../files/transfer.js';
import { BackendRegistry } from './backend-registry.js';
import { JobRunner, type JobReadResult, type JobSummary } from './jobs.js';
import { KeyedLock } from './keyed-lock.js';
import { cleanSpillDir, spillDirOf, spillMaxAgeMs } from './spill.js';
import { ownerAlive, ownerToken } from './process-owner.js';
import { registerAlias, resolveCall, sessionRefOf, startCwd, type Binding, type ResolvedCall } from './resolve-call.js';
import { SessionCalls, sessionKey, type SessionCall } from './session-calls.js';
import { StateStore, type SandboxRecord } from './state-store.js';
import { storeLease } from './store-lease.js';
import { TaskOverrideSchema, type TaskOverride } from './task-override.js';

export interface BrokerOptions {
  /** A validated config; when absent it is loaded from `configPath`, `./berth.yaml` or `$BERTH_HOME/config.yaml`. */
  config?: BerthConfig;
  configPath?: string;
  /** Directory searched for `berth.yaml` (default: process.cwd()). */
  cwd?: string;
  /** State dir (default `$BERTH_HOME` or `~/.berth`). */
  berthHome?: string;
  /** The environment read once at start-up (forwarded grants, BERTH_SESSION). Default: process.env. */
  env?: NodeJS.ProcessEnv;
  /** Injected backends (tests). */
  backends?: Partial<Record<BackendName, Backend>>;
  /**
   * Whether this process holds the sessions it opens (default true: a library or server owns its
   * sessions; if it dies they are reaped). The CLI passes false: its sessions stay open across
   * invocations until `berth close` or idle expiry.
   */
  holdSessions?: boolean;
  /** Run the orphan reaper at first engine use and periodically (default true). */
  reap?: boolean;
  /**
   * Keep the full output of a command over `exec.maxOutputChars` in a private spill file and
   * report it as `fullOutputPath` (default true). The CLI passes false: it streams the whole
   * output live, and a file would outlive the call that could use it.
   */
  spillOutput?: boolean;
  log?: (namespace: string, message: string) => void;
}

export interface ExecOptions {
  timeoutSeconds?: number;
  workdir?: string;
  stdin?: string | Buffer;
  onChunk?: (stream: 'stdout' | 'stderr', chunk: string) => void;
  /**
   * Cancels the command when the caller goes away (an HTTP client that disconnected): its
   * process tree is killed as on a timeout and the result (and the audit) has exit code 130.
   */
  signal?: AbortSignal;
}

export interface BrokerExecResult extends ExecResult {
  sandboxKey: string;
}

export interface SandboxInfo {
  sandboxKey: string;
  tenant: string;
  profile: string | null;
  backend: string;
  rule: string;
  persistent: boolean;
  name: string;
  mount: string | null;
  createdMs: number;
  lastUsedMs: number;
  sessions: { session: string; open: boolean }[];
}

export interface CloseResult {
  /** Keys of the ephemeral sandboxes this close removed. */
  removed: string[];
  /** Keys of the sandboxes kept (persistent, or still used by another open session). */
  kept: string[];
}

interface LiveShell {
  shell: PersistentShell;
  tenant: string;
  profile: string;
  sessionRef: string;
  /** The cwd last written to the store for this shell identity (skip rewriting the same value). */
  recordedCwd: string | undefined;
}

interface LiveSandbox {
  digest: string;
  backend: Backend;
  sandbox: Sandbox;
  record: SandboxRecord;
  idleMs: number;
  inflight: number;
  lastActivityMs: number;
  /** The backend recreated a sandbox removed out of band; the next result says so. */
  recreatedUnreported: boolean;
  shells: Map<string, Promise<LiveShell>>;
  /** Ends process trees in the sandbox without a new process there; started with the first shell. */
  warden: Warden;
  /** Sessions linked to this sandbox by this process, with when `last_seen` was last written. */
  sessions: Map<string, number>;
  /** When its disk use was last measured (0: never). */
  diskCheckedMs: number;
  /** Set when it went over its disk bound: calls in flight on it end with this error. */
  diskBreach?: BerthError;
}

const SESSION_TOUCH_MS = 5_000;
/** Time one disk-check pass may take (a measurement costs the engine a walk of the writable layer). */
const DISK_CHECK_BUDGET_MS = 10_000;
/** A CLI process starts a sandbox's warden once a command has run this long. */
const WARDEN_AFTER_MS = 300;
/** A container this close to its pids limit when a shell cannot start counts as out of processes. */
const PIDS_HEADROOM = 8;
/** How long a process waits for another one creating the same sandbox, and when its claim is stale. */
const CLAIM_WAIT_MS = 90_000;
const CLAIM_STALE_MS = 60_000;

const DOCKER_SOCKETS = ['/var/run/docker.sock', '/run/docker.sock'];

/**
 * The composition root: config, state store, backends, sandboxes and shells for one installation.
 *
 * @example
 * ```ts
 * await using broker = await Broker.open({ config: parseConfig({ backend: 'docker' }) });
 * const session = broker.session({ tenant: 'acme', session: 'chat-42' });
 * const r = await session.exec('cd /workspace && ls');
 * console.log(r.exitCode, r.stdout);
 * await session.close(); // removes the session's ephemeral sandbox
 * ```
 */
export class Broker implements AsyncDisposable {
  readonly config: BerthConfig;
  readonly berthHome: string;
  readonly installationId: string;
  private readonly store: StateStore;
  private readonly backends: BackendRegistry;
  private readonly hostEnv: Readonly<Record<string, string | undefined>>;
  private readonly envSession: string | undefined;
  private readonly homeDir: string;
  private readonly dockerSockets: string[];
  private readonly owner: string | null;
  /** This process (`pid:starttime`), on the creation claims it makes. */
  private readonly processToken = ownerToken();
  private readonly reap: boolean;
  private readonly spillOutput: boolean;
  private readonly log: (namespace: string, message: string) => void;
  private readonly locks = new KeyedLock();
  private readonly live = new Map<string, LiveSandbox>();
  private readonly sessionCalls = new SessionCalls();
  private readonly checked = new Set<string>();
  private reaped: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | undefined;
  private closing: Promise<void> | undefined;

  private constructor(opts: BrokerOptions, config: BerthConfig, berthHome: string, store: StateStore) {
    const env = opts.env ?? process.env;
    this.config = config;
    this.berthHome = berthHome;
    this.stagingLedger = new StagingLedger(berthHome);
    this.store = store;
    this.installationId = store.installationId;
    this.hostEnv = Object.freeze({ ...env });
    this.envSession = env['BERTH_SESSION'] || undefined;
    this.homeDir = homedir();
    this.dockerSockets = dockerSocketsOf(env);
    this.owner = opts.holdSessions === false ? null : ownerToken();
    this.reap = opts.reap ?? true;
    this.spillOutput = opts.spillOutput ?? true;
    this.log = opts.log ?? (() => {});
    this.backends = new BackendRegistry({
      berthHome, installation: store.installationId, injected: opts.backends, log: (m) => this.log('berth:backend', m),
      lease: storeLease(store),
    });
  }

  /** Reads config and state once; contacts no engine until a call needs one. */
  static async open(opts: BrokerOptions = {}): Promise<Broker> {
    const env = opts.env ?? process.env;
    const berthHome = opts.berthHome ?? defaultBerthHome(env);
    const config = opts.config ?? loadConfig({ configFlag: opts.configPath, cwd: opts.cwd ?? process.cwd(), berthHome });
    const secrets = readSecretsFiles(config);
    assertVolumesAllowed(config, { homeDir: homedir(), stateDir: berthHome, dockerSockets: dockerSocketsOf(env) });
    assertAllowedRootsExist(config);
    const store = StateStore.open(berthHome, { auditMaxCommandChars: config.audit.maxCommandChars });
    const broker = new Broker(opts, config, berthHome, store);
    cleanSpillDir(spillDirOf(berthHome), spillMaxAgeMs(config));
    broker.pruneAudit();
    broker.secrets = secrets;
    if (broker.reap) {
      const everyMs = Math.min(60_000, Math.max(1_000, minIdleMs(config) / 4));
      broker.timer = setInterval(() => void broker.sweep(), everyMs);
      broker.timer.unref();
    }
    return broker;
  }

  /** A handle bound to one call scope. */
  session(scope: CallScopeInput): SessionHandle {
    return new SessionHandle(this, scope);
  }

  /** The binding for a call: pure policy, no engine contacted (`--parent` registers its alias). */
  explain(scope: CallScopeInput = {}): Binding {
    return this.resolve(scope).binding;
  }

  /** Sets per-task overrides (image, backend, cwd, cwd source) for a task of this scope. */
  setTaskOverride(scope: CallScopeInput, override: TaskOverride): void {
    const s = this.normalize(scope);
    if (s.task === undefined) throw new PolicyRefusedError('a task override needs a task id (scope.task)');
    const parsed = TaskOverrideSchema.parse(override);
    this.store.putTaskOverride(s.tenant, s.profile, s.task, parsed, s.session ?? null);
    // Validate now so a forbidden backend is refused when it is set, not at the next call.
    this.resolve(s);
  }

  /** Runs one shell line in the call's sandbox, through its persistent shell. */
  async exec(scope: CallScopeInput, command: string, opts: ExecOptions = {}): Promise<BrokerExecResult> {
    this.assertOpen();
    const call = this.resolve(scope, { withCwd: false });
    const started = Date.now();
    let result: BrokerExecResult | undefined;
    try {
      result = await this.execResolved(call, command, opts);
      return result;
    } finally {
      this.store.addAudit({
        timeMs: started, tenant: call.scope.tenant, profile: call.scope.profile, user: call.scope.user ?? null,
        session: call.scope.session ?? null, sandboxKey: call.binding.sandboxKey, kind: 'exec',
        command: redactText(command, call.redactValues), exitCode: result?.exitCode ?? null, durationMs: Date.now() - started,
      });
    }
  }

  private async execResolved(call: ResolvedCall, command: string, opts: ExecOptions): Promise<BrokerExecResult> {
    const timeoutMs = Math.round((opts.timeoutSeconds ?? call.settings.exec.timeoutSeconds) * 1000);
    const workdir = opts.workdir === undefined ? undefined
      : mapWorkdir(opts.workdir, { containerBackend: isContainerBackend(call.settings.backend), mount: call.spec.mount });
    return this.inSession(call, (sc) => this.runInSandbox(call, sc, command, { ...opts, timeoutMs, workdir }));
  }

  private async runInSandbox(call: ResolvedCall, sc: SessionCall, command: string, opts: ExecOptions & { timeoutMs: number }): Promise<BrokerExecResult> {
    const { timeoutMs, workdir } = opts;
    let gone = false;
    let restarted: string | undefined;
    for (let attempt = 0; ; attempt++) {
      const live = await this.sandboxForCall(call, sc);
      live.inflight++;
      live.lastActivityMs = Date.now();
      let lazyWarden: NodeJS.Timeout | undefined;
      try {
        const ls = await this.shellFor(call, live);
        if (this.owner === null) lazyWarden = setTimeout(() => void live.warden.start(), WARDEN_AFTER_MS);
        const r = await ls.shell.run(command, { timeoutMs, workdir, stdin: opts.stdin, onChunk: opts.onChunk, signal: opts.signal });
        if (live.diskBreach) throw live.diskBreach;
        // The record follows only what the shell reports after a completed command.
        if (r.cwd !== '' && !r.timedOut && r.cwd !== ls.recordedCwd) {
          this.recordCwd(call, r.cwd);
          ls.recordedCwd = r.cwd;
        }
        let out: BrokerExecResult = restarted === undefined ? { ...r, sandboxKey: call.binding.sandboxKey }
          : { ...r, stderr: restarted + r.stderr, output: restarted + r.output, sandboxKey: call.binding.sandboxKey };
        // The command ended (timed out) and no new shell could start after it: free the sandbox now.
        const full = ls.shell.hasShell || this.closing ? undefined : await this.outOfProcesses(live);
        if (full !== undefined) {
          const notice = await this.restartSandbox(call, live, full);
          opts.onChunk?.('stderr', notice);
          out = { ...out, stderr: out.stderr + notice, output: out.output + notice };
        }
        // Reported once, on the call that found the sandbox gone.
        if (live.recreatedUnreported || gone) out.sandboxRecreated = true;
        live.recreatedUnreported = false;
        return out;
      } catch (err) {
        // The sandbox vanished (or was stopped) out of band between calls: re-ensure once (a
        // removed one is recreated and the result says so; a stopped one is just started). A
        // backend may report the missing container only as a failed shell start, so ask the engine.
        // A call overtaken by its session's close never recreates what the close removed.
        if (err === live.diskBreach) throw err;
        const state = attempt > 0 || this.closing || sc.overtaken ? undefined
          : err instanceof SandboxNotFoundError ? 'gone' : await this.outOfBandState(live);
        if (state !== undefined) {
          this.log('berth:broker', `sandbox ${call.binding.sandboxKey} is ${state}; re-ensuring it once`);
          gone = state === 'gone';
          await this.forget(live);
          continue;
        }
        const startFailed = err instanceof BerthError && (err.code === 'shell_start_failed' || err.code === 'timeout');
        const full = attempt > 0 || this.closing || !startFailed ? undefined : await this.outOfProcesses(live);
        if (full !== undefined) {
          restarted = await this.restartSandbox(call, live, full);
          opts.onChunk?.('stderr', restarted);
          continue;
        }
        throw err;
      } finally {
        clearTimeout(lazyWarden);
        live.inflight--;
        live.lastActivityMs = Date.now();
      }
    }
  }

  /**
   * Closes a session: its shells, cwd records, aliases and overrides; removes ephemeral sandboxes no
   * other open session uses. The subagents registered under the session's task (and theirs) belong
   * to its conversation: they are closed first, so they no longer hold the sandbox they share.
   */
  async closeSession(scope: CallScopeInput): Promise<CloseResult> {
    const s = this.normalize(scope);
    const ref = sessionRefOf(s);
    const results: CloseResult[] = [];
    for (const child of subagentSessionRefs(this.store, s, ref)) {
      results.push(await this.closeSessionRef(s.tenant, s.profile, child, s));
    }
    results.push(await this.closeSessionRef(s.tenant, s.profile, ref, s));
    const removed = [...new Set(results.flatMap((r) => r.removed))];
    const kept = [...new Set(results.flatMap((r) => r.kept))].filter((k) => !removed.includes(k));
    return { removed, kept };
  }

  private async closeSessionRef(tenant: string, profile: string, sessionRef: string, scope?: CallScope): Promise<CloseResult> {
    const started = Date.now();
    const id = sessionKey(tenant, profile, sessionRef);
    // The session's calls under way may not outlive the close with a sandbox of their own: from now
    // on none creates, recreates or reopens anything, and those still getting their sandbox are
    // waited for, so what they create is linked to the session by then and removed below.
    const overtaken = this.sessionCalls.overtake(id);
    await Promise.all(overtaken.map((c) => c.ensuring?.catch(() => undefined)));
    for (const live of this.live.values()) {
      live.sessions.delete(id);
      for (const [key, p] of live.shells) {
        const ls = await p.catch(() => undefined);
        if (ls && ls.tenant === tenant && ls.profile === profile && ls.sessionRef === sessionRef) {
          live.shells.delete(key);
          await ls.shell.close();
        }
      }
    }
    const digests = this.store.closeSession(tenant, profile, sessionRef, Date.now());
    await removeSessionStaging(this.berthHome, { tenant, profile, sessionRef }).catch((e) => this.log('berth:files', `remove staging of ${sessionRef}: ${String(e)}`));
    const result: CloseResult = { removed: [], kept: [] };
    for (const digest of digests) {
      const rec = this.store.getSandbox(digest);
      if (rec === undefined) continue;
      if (rec.ephemeral && !this.hasLiveSession(rec)) {
        await this.removeSandbox(rec);
        result.removed.push(rec.key);
      } else {
        result.kept.push(rec.key);
      }
    }
    this.store.addAudit({
      timeMs: started, tenant, profile, user: scope?.user ?? null, session: sessionRef, sandboxKey: null,
      kind: 'close', command: null, exitCode: null, durationMs: Date.now() - started,
    });
    return result;
  }

  /** Removes the call's sandbox (persistent ones too) after closing its shells. */
  async removeSandboxOf(scope: CallScopeInput): Promise<boolean> {
    const call = this.resolve(scope);
    const rec = this.store.getSandbox(call.spec.digest);
    if (rec === undefined) return false;
    await this.removeSandbox(rec);
    return true;
  }

  /** Sandboxes of a tenant as the store knows them (no engine contacted). */
  list(tenant: string): SandboxInfo[] {
    return this.store.listSandboxes(tenant).map((r) => ({
      sandboxKey: r.key, tenant: r.tenant, profile: r.profile, backend: r.backend, rule: r.rule, persistent: !r.ephemeral,
      name: r.name, mount: r.mount, createdMs: r.createdMs, lastUsedMs: r.lastUsedMs,
      sessions: this.store.sessionsOf(r.digest).map((s) => ({ session: s.session, open: this.sessionLive(s, r) })),
    }));
  }

  /** Audit entries of one tenant (of the given profiles only, when `profiles` is set), newest first. */
  audit(filter: { tenant: string; profiles?: readonly string[]; user?: string; session?: string; limit?: number }) {
    return this.store.listAudit(filter);
  }

  // --- files, media (issue 4) ---
  /** Secrets files (`env.secretsFile`) read once at start-up, by path. */
  private secrets: ReadonlyMap<string, SecretsFile> = new Map();
  /** Each tenant's exports in staging, against `limits.stagingBytes`. */
  private readonly stagingLedger: StagingLedger;

  /**
   * Writes one file into the call's sandbox; `path` is absolute or relative to the shell's cwd.
   * Missing parent dirs are created. Over `files.maxBytes`, or on a refused path, nothing is written.
   *
   * @example
   * await broker.upload({ session: 's1' }, { path: '/workspace/data.csv', data: Buffer.from('a,b\n') });
   */
  upload(scope: CallScopeInput, a: { path: string; data: Buffer; mode?: number }): Promise<{ path: string; bytes: number }> {
    return this.fileCall(scope, 'upload', `upload ${a.path} (${Buffer.isBuffer(a.data) ? a.data.length : 0} bytes)`, (ctx) => uploadFile(ctx, a));
  }

  /**
   * Streams one file of `size` bytes into the call's sandbox, never holding it whole in memory:
   * what `upload` does for a body that arrives as a stream (an HTTP request, a file read stream).
   * The path and the size are checked before a byte is read; the stream must give exactly `size`
   * bytes. On any failure nothing is written (an existing file stays as it was). A refused call
   * leaves `stream` unread; disposing of it is the caller's.
   *
   * @example
   * const { size } = await stat('data.csv');
   * await broker.uploadStream({ session: 's1' }, { path: '/workspace/data.csv', size, stream: createReadStream('data.csv') });
   */
  uploadStream(scope: CallScopeInput, a: { path: string; size: number; stream: AsyncIterable<Uint8Array>; mode?: number }): Promise<{ path: string; bytes: number }> {
    return this.fileCall(scope, 'upload', `upload ${a.path} (${a.size} bytes)`, (ctx) => uploadFileStream(ctx, a));
  }

  /** Extracts a tar of files and folders under `dir` in the sandbox (symlinks and special files refused). */
  uploadTar(scope: CallScopeInput, a: { dir: string; tar: Buffer }): Promise<{ dir: string; entries: number }> {
    return this.fileCall(scope, 'upload', `upload tar into ${a.dir} (${Buffer.isBuffer(a.tar) ? a.tar.length : 0} bytes)`, (ctx) => uploadTarball(ctx, a));
  }

  /** Reads one sandbox file into memory, at most `maxBytes` (never above `files.maxBytes`). */
  readFile(scope: CallScopeInput, a: { path: string; maxBytes?: number }): Promise<{ path: string; data: Buffer }> {
    return this.fileCall(scope, 'read', `read ${a.path}`, (ctx) => readSandboxFile(ctx, a));
  }

  /**
   * Copies a sandbox file or folder into the session's private staging dir on the host
   * (`$BERTH_HOME/staging/...`, removed when the session closes).
   *
   * @example
   * const { hostPath } = await broker.exportPath({ session: 's1' }, { path: '/workspace/report' });
   */
  exportPath(scope: CallScopeInput, a: { path: string; maxBytes?: number }): Promise<{ hostPath: string; bytes: number; kind: 'file' | 'dir' }> {
    return this.fileCall(scope, 'export', `export ${a.path}`, (ctx) => exportToStaging(ctx, a));
  }

  /**
   * A host path a gateway can attach for a file the agent names in its sandbox: a copy in the
   * session's staging dir (`files.mediaMode: copy`, the default), or with `mediaMode: live` the
   * file under the sandbox's own host dir when it has one (no copy; the agent can swap it for a
   * symlink after the check, see the README), else an export.
   *
   * @example
   * const { hostPath } = await broker.mediaPath({ user: 'telegram:1' }, '/workspace/chart.png');
   */
  mediaPath(scope: CallScopeInput, sandboxPath: string): Promise<{ hostPath: string; exported: boolean }> {
    return this.fileCall(scope, 'media', `media ${sandboxPath}`, (ctx) => mediaHostPath(ctx, sandboxPath));
  }

  /** Runs one file operation in the call's sandbox (kept busy meanwhile) and records it in the audit log. */
  private async fileCall<T>(scope: CallScopeInput, kind: string, text: string, run: (ctx: TransferContext) => Promise<T>): Promise<T> {
    this.assertOpen();
    const call = this.resolve(scope);
    const started = Date.now();
    let failure: string | undefined = 'error';
    try {
      return await this.inSession(call, async (sc) => {
        const live = await this.sandboxForCall(call, sc);
        live.inflight++;
        live.lastActivityMs = Date.now();
        try {
          const r = await run(this.transferContext(call, live));
          failure = undefined;
          return r;
        } finally {
          live.inflight--;
          live.lastActivityMs = Date.now();
        }
      });
    } catch (err) {
      failure = err instanceof BerthError ? err.code : 'error';
      throw err;
    } finally {
      this.store.addAudit({
        timeMs: started, tenant: call.scope.tenant, profile: call.scope.profile, user: call.scope.user ?? null,
        session: call.scope.session ?? null, sandboxKey: call.binding.sandboxKey, kind,
        command: redactText(failure === undefined ? text : `${text} [failed: ${failure}]`, call.redactValues),
        exitCode: failure === undefined ? 0 : null, durationMs: Date.now() - started,
      });
    }
  }

  private transferContext(call: ResolvedCall, live: LiveSandbox): TransferContext {
    const sandbox = live.sandbox;
    const roots = [...sandbox.fileRoots];
    // On local, an attached workspace is the session's starting dir and one of its roots.
    if (live.backend.kind === 'host' && !roots.some((r) => call.defaultCwd === r || call.defaultCwd.startsWith(`${r}/`))) roots.push(call.defaultCwd);
    return {
      sandbox,
      policy: { roots, home: sandbox.homeDir, berthDirs: [sandbox.stateDir] },
      cwd: call.binding.cwd || call.defaultCwd,
      maxBytes: call.settings.files.maxBytes,
      mediaMode: call.settings.files.mediaMode,
      staging: () => ensurePrivateDir(this.berthHome, stagingDirFor(this.berthHome, {
        tenant: call.scope.tenant, profile: call.scope.profile, user: call.scope.user, sessionRef: call.sessionRef,
      })),
      stagingLease: () => this.stagingLedger.begin(call.scope.tenant, this.config.limits.stagingBytes),
      redactValues: call.redactValues,
      log: (m) => this.log('berth:files', `${call.binding.sandboxKey}: ${m}`),
    };
  }

  // --- background jobs (issue 5) ---
  private jobRunner: JobRunner | undefined;

  private get jobs(): JobRunner {
    this.jobRunner ??= new JobRunner({
      store: this.store,
      resolve: (scope) => this.resolve(scope),
      policy: () => ({ config: this.config, hostEnv: this.hostEnv, secrets: this.secrets }),
      sandboxFor: async (call) => (await this.sandboxFor(call)).sandbox,
      run: (call, line, o) => this.execResolved(call, line, { workdir: o.workdir, stdin: o.stdin, timeoutSeconds: 30 }),
      existingSandbox: (call, digest) => this.existingSandbox(call, digest),
      audit: (call, command, startedMs) => this.store.addAudit({
        timeMs: startedMs, tenant: call.scope.tenant, profile: call.scope.profile, user: call.scope.user ?? null,
        session: call.scope.session ?? null, sandboxKey: call.binding.sandboxKey, kind: 'job', command, exitCode: null,
        durationMs: Date.now() - startedMs,
      }),
      log: (m) => this.log('berth:jobs', m),
    });
    return this.jobRunner;
  }

  /**
   * Starts `command` as a background job in the call's sandbox: it outlives the request, its
   * output stays in the sandbox. Resolves once the job runs.
   *
   * @example
   * const { jobId } = await broker.startJob({ session: 's1' }, 'npm test');
   * const r = await broker.readJob({ session: 's1' }, jobId, { offset: 0 }); // r.output, r.nextOffset, r.done
   */
  startJob(scope: CallScopeInput, command: string, opts: { workdir?: string } = {}): Promise<{ jobId: string; sandboxKey: string }> {
    this.assertOpen();
    return this.jobs.start(this.resolve(scope), command, opts);
  }

  /** Output of a job of the call's session from a byte offset, and its status (exit code once done). */
  readJob(scope: CallScopeInput, jobId: string, opts: { offset?: number; maxBytes?: number } = {}): Promise<JobReadResult> {
    this.assertOpen();
    return this.jobs.read(this.normalize(scope), jobId, opts);
  }

  /** Kills one job's process tree (nothing else in the sandbox); false when it had already ended. */
  killJob(scope: CallScopeInput, jobId: string): Promise<{ killed: boolean }> {
    this.assertOpen();
    return this.jobs.kill(this.normalize(scope), jobId);
  }

  /** The jobs of the call's session, oldest first. */
  listJobs(scope: CallScopeInput): Promise<JobSummary[]> {
    this.assertOpen();
    return this.jobs.list(this.normalize(scope));
  }

  /**
   * `list` plus each sandbox's state: `active` (open in this process), else what its engine says
   * (`running`, `stopped`, `missing`), or `unknown` when the engine does not answer.
   */
  async listWithState(tenant: string): Promise<Array<SandboxInfo & { state: 'active' | 'running' | 'stopped' | 'missing' | 'unknown' }>> {
    const records = this.store.listSandboxes(tenant);
    const managed = new Map<string, ManagedSandbox[] | undefined>();
    for (const name of new Set(records.map((r) => r.backend))) {
      const backend = await this.backends.get(name as BackendName).catch(() => undefined);
      managed.set(name, backend?.kind === 'container' ? await backend.listManaged().catch(() => undefined) : []);
    }
    const infos = this.list(tenant);
    return infos.map((info) => {
      const rec = records.find((r) => r.key === info.sandboxKey && r.profile === info.profile);
      let state: 'active' | 'running' | 'stopped' | 'missing' | 'unknown' = 'unknown';
      if (rec !== undefined && this.live.has(rec.digest)) state = 'active';
      else if (rec !== undefined) {
        const seen = managed.get(rec.backend);
        if (seen === undefined) state = 'unknown';
        else if (rec.backend === 'local') state = rec.hostDir !== null && existsSync(rec.hostDir) ? 'stopped' : 'missing';
        else {
          const m = seen.find((x) => x.ref === rec.ref);
          state = m === undefined ? 'missing' : m.running ? 'running' : 'stopped';
        }
      }
      return { ...info, state };
    });
  }

  /** A job's sandbox if it still exists (live, or recorded and reattached); never creates one. */
  private async existingSandbox(call: ResolvedCall | undefined, digest: string): Promise<Sandbox | undefined> {
    const live = this.live.get(digest);
    if (live !== undefined) return live.sandbox;
    const rec = this.store.getSandbox(digest);
    if (rec === undefined || rec.ref === '' || call === undefined || call.settings.backend !== rec.backend) return undefined;
    const backend = await this.backends.get(rec.backend as BackendName);
    if (backend.kind === 'container') {
      if (!(await backend.listManaged()).some((m) => m.ref === rec.ref)) return undefined;
    } else if (rec.hostDir === null || !existsSync(rec.hostDir)) {
      return undefined;
    }
    return (await this.sandboxFor(call)).sandbox;
  }

  /**
   * Shuts down: waits for in-flight calls (bounded), closes shells (their state snapshot is kept in
   * the sandbox), removes the ephemeral sandboxes of sessions this process holds, keeps the rest.
   */
  async close(opts: { graceMs?: number } = {}): Promise<void> {
    this.closing ??= this.doClose(opts.graceMs ?? 10_000);
    return this.closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private async doClose(graceMs: number): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.sweeping;
    const deadline = Date.now() + graceMs;
    while ([...this.live.values()].some((l) => l.inflight > 0) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    if (this.owner !== null) {
      for (const s of this.store.listSessions()) {
        if (s.owner === this.owner && s.closedMs === null) {
          await this.closeSessionRef(s.tenant, s.profile, s.session).catch((e) => this.log('berth:broker', `close ${s.session}: ${String(e)}`));
        }
      }
      this.store.releaseSessions(this.owner);
    }
    for (const live of this.live.values()) await this.closeShells(live);
    this.live.clear();
    await this.backends.closeAll();
    this.store.close();
  }

  // --- internals -----------------------------------------------------------------------

  private assertOpen(): void {
    if (this.closing) throw new BerthError('shutting_down', 'berth is shutting down; retry the call on a running berth');
  }

  private normalize(scope: CallScopeInput): CallScope {
    return normalizeScope(effectiveScope(scope, this.envSession));
  }

  /** `withCwd: false` skips the start-cwd lookup (exec needs it only when a shell starts). */
  private resolve(scopeInput: CallScopeInput, opts: { withCwd: boolean } = { withCwd: true }): ResolvedCall {
    const scope = this.normalize(scopeInput);
    registerAlias(this.store, scope);
    return resolveCall({
      config: this.config, store: this.store, berthHome: this.berthHome, homeDir: this.homeDir,
      dockerSockets: this.dockerSockets, hostEnv: this.hostEnv, secrets: this.secrets,
    }, scope, opts);
  }

  private async backendFor(call: ResolvedCall): Promise<Backend> {
    const backend = await this.backends.get(call.settings.backend);
    const checkKey = `${call.settings.backend}:${call.scope.profile}:${call.settings.docker.image}`;
    if (!this.checked.has(checkKey)) {
      await backend.check(call.settings);
      this.checked.add(checkKey);
      if (this.reap) await this.reapOrphansOnce(backend);
    }
    return backend;
  }

  private reapOrphansOnce(backend: Backend): Promise<void> {
    this.reaped ??= this.reapOrphans([backend]).then(
      () => undefined,
      (e: unknown) => this.log('berth:reaper', `orphan reap failed: ${String(e)}`),
    );
    return this.reaped;
  }

  /**
   * Runs one call of the call's session, registered so that a close of the session can tell it
   * overtook the call. An overtaken call that fails says so (its sandbox went with the close).
   */
  private async inSession<T>(call: ResolvedCall, run: (sc: SessionCall) => Promise<T>): Promise<T> {
    const sc = this.sessionCalls.begin(sessionKey(call.scope.tenant, call.scope.profile, call.sessionRef));
    try {
      return await run(sc);
    } catch (err) {
      if (!sc.overtaken || (isBerthError(err) && CALLER_ERRORS.has(err.code))) throw err;
      throw sessionClosedError(call, err);
    } finally {
      sc.end();
    }
  }

  /** `sandboxFor` for a call of a session: refused once a close overtook the call. */
  private async sandboxForCall(call: ResolvedCall, sc: SessionCall): Promise<LiveSandbox> {
    if (sc.overtaken) throw sessionClosedError(call);
    const ensuring = this.sandboxFor(call);
    sc.ensuring = ensuring;
    let live: LiveSandbox;
    try {
      live = await ensuring;
    } finally {
      sc.ensuring = undefined;
    }
    if (sc.overtaken) throw sessionClosedError(call);
    return live;
  }

  /** Get-or-create under the identity's lock: concurrent first calls create one sandbox. */
  private sandboxFor(call: ResolvedCall): Promise<LiveSandbox> {
    const existing = this.live.get(call.spec.digest);
    if (existing !== undefined && existing.backend.name === call.settings.backend) {
      // Hot path: no lock and no store write unless this session is new to the sandbox.
      this.assertMountFits(call, existing.record);
      this.linkSession(call, existing);
      return Promise.resolve(existing);
    }
    return this.locks.run(`sandbox:${call.spec.digest}`, async () => {
      const raced = this.live.get(call.spec.digest);
      if (raced !== undefined && raced.backend.name === call.settings.backend) {
        this.linkSession(call, raced);
        return raced;
      }
      let known = this.store.getSandbox(call.spec.digest);
      if (known !== undefined && known.backend !== call.settings.backend) {
        // The config (or a task override) moved this identity to another backend: the old ref
        // means nothing to the new backend (a local dir is no container id).
        await this.retireForeign(known, raced);
        known = undefined;
      }
      const backend = await this.backendFor(call);
      const claim = await this.claimOrAwait(call, backend, known);
      this.assertMountFits(call, claim.record);
      const pending = claim.record;
      const now = Date.now();
      let sandbox: Sandbox;
      try {
        sandbox = await backend.ensure(call.spec, claim.mine ? undefined : pending.ref);
      } catch (err) {
        if (claim.mine) this.store.deleteSandbox(call.spec.digest);
        throw err;
      }
      const record: SandboxRecord = {
        ...pending, ref: sandbox.ref, name: sandbox.name, hostDir: sandbox.hostDir ?? null, lastUsedMs: now,
      };
      this.store.putSandbox(record);
      const live: LiveSandbox = {
        digest: call.spec.digest, backend, sandbox, record, idleMs: call.settings.lifecycle.idleSeconds * 1000,
        inflight: 0, lastActivityMs: now, recreatedUnreported: sandbox.recreated, shells: new Map(), sessions: new Map(), diskCheckedMs: 0,
        warden: new Warden({
          open: () => sandbox.openShell({ env: {}, cwd: sandbox.defaultCwd }),
          mayKillAll: backend.kind === 'container',
          label: call.binding.sandboxKey,
        }),
      };
      this.live.set(call.spec.digest, live);
      this.linkSession(call, live);
      return live;
    });
  }

  /**
   * Get-or-create across processes: the record is the claim. The process that inserts it creates
   * the sandbox; another one waits until the claimant records its ref (or gave up, or crashed).
   * The intent is recorded before any container exists, so no orphan reaper mistakes it for one.
   */
  private async claimOrAwait(call: ResolvedCall, backend: Backend, known: SandboxRecord | undefined): Promise<{ record: SandboxRecord; mine: boolean }> {
    const deadline = Date.now() + CLAIM_WAIT_MS;
    let rec = known;
    for (;;) {
      const now = Date.now();
      if (rec === undefined) {
        const fresh: SandboxRecord = {
          digest: call.spec.digest, backend: backend.name, tenant: call.scope.tenant, profile: call.spec.identity.profile ?? null,
          key: call.binding.sandboxKey, rule: call.spec.rule, ephemeral: call.spec.ephemeral, ref: '', name: call.spec.dirName,
          hostDir: null, mount: call.spec.mount, createdMs: now, lastUsedMs: now, claimOwner: this.processToken,
        };
        if (this.store.claimSandbox(fresh)) return { record: fresh, mine: true };
      } else if (rec.ref !== '') {
        return { record: rec, mine: false };
      } else if (claimAbandoned(rec, now) && this.store.takeOverClaim(rec.digest, rec.createdMs, now, this.processToken)) {
        return { record: { ...rec, createdMs: now, claimOwner: this.processToken }, mine: true };
      } else if (now > deadline) {
        throw new TimeoutError(`sandbox "${call.binding.sandboxKey}" is being created by another berth process and has no container after ${CLAIM_WAIT_MS / 1000} s; retry, or check that process`);
      } else {
        await new Promise((r) => setTimeout(r, 25));
      }
      rec = this.store.getSandbox(call.spec.digest);
    }
  }

  private assertMountFits(call: ResolvedCall, known: SandboxRecord): void {
    if (call.spec.mount !== null && known.mount !== call.spec.mount) {
      throw new PolicyRefusedError(
        `sandbox "${call.binding.sandboxKey}" already mounts ${known.mount ?? 'no workspace'} at /workspace, not ${call.spec.mount}; ` +
        'a mount is fixed when the sandbox is created: use the same workspace, or remove the sandbox first (berth rm with the same scope flags)');
    }
  }

  /**
   * Opens the call's session in the store and links it to the sandbox the first time this process
   * sees the pair; afterwards only refreshes `last_seen` every few seconds (idle expiry needs no more).
   */
  private linkSession(call: ResolvedCall, live: LiveSandbox): void {
    const id = sessionKey(call.scope.tenant, call.scope.profile, call.sessionRef);
    const now = Date.now();
    const seen = live.sessions.get(id);
    if (seen === undefined) {
      this.store.openSession(call.scope.tenant, call.scope.profile, call.sessionRef, call.spec.digest, this.owner, now);
      live.sessions.set(id, now);
    } else if (now - seen > SESSION_TOUCH_MS) {
      this.store.touchSession(call.scope.tenant, call.scope.profile, call.sessionRef, now);
      this.store.touchSandbox(live.digest, now);
      live.sessions.set(id, now);
    }
  }

  private shellFor(call: ResolvedCall, live: LiveSandbox): Promise<LiveShell> {
    const existing = live.shells.get(call.shell.digest);
    if (existing !== undefined) return existing;
    const sandbox = live.sandbox;
    // A long-lived broker opens it with the sandbox's first shell, before a command could take
    // every pid there. Not waited for: a docker engine starts one exec at a time per container,
    // so waiting would add a whole exec to the first call; a bomb that wins the race is handled
    // by the sandbox restart. A CLI process opens it only for a slow command (see execResolved):
    // it lives for one command, and a fast one should not pay for it.
    if (this.owner !== null) void live.warden.start();
    const p = PersistentShell.start({
      open: (extra) => sandbox.openShell({ env: { ...call.env, ...extra }, cwd: sandbox.defaultCwd }),
      execOnce: (argv, o) => sandbox.execOnce(argv, o),
      killer: live.warden,
      stateDir: sandbox.stateDir,
      shellId: call.shell.fileStem,
      defaultCwd: call.defaultCwd,
      initialCwd: startCwd(this.store, call),
      secretNames: call.secretNames,
      spillDir: this.spillOutput ? spillDirOf(this.berthHome) : undefined,
      maxOutputChars: call.settings.exec.maxOutputChars,
      redactValues: call.redactValues,
    }).then((shell): LiveShell => ({
      shell, tenant: call.scope.tenant, profile: call.scope.profile, sessionRef: call.sessionRef, recordedCwd: undefined,
    }));
    live.shells.set(call.shell.digest, p);
    p.catch(() => live.shells.delete(call.shell.digest));
    return p;
  }

  private recordCwd(call: ResolvedCall, cwd: string): void {
    this.store.putCwd(call.shell.digest, {
      tenant: call.scope.tenant, profile: call.scope.profile, session: call.scope.session ?? null, cwd, backend: call.settings.backend,
    }, Date.now());
  }

  private async closeShells(live: LiveSandbox): Promise<void> {
    const shells = [...live.shells.values()];
    live.shells.clear();
    await Promise.all(shells.map(async (p) => {
      const ls = await p.catch(() => undefined);
      await ls?.shell.close();
    }));
    await live.warden.close();
  }

  /**
   * Drops a sandbox recorded under another backend than the one its identity now resolves to.
   * An ephemeral one is removed (its sessions continue on the new backend); a persistent one's
   * files stay where that backend keeps them, found again by name if the config switches back.
   * Runs under the identity's lock.
   */
  private async retireForeign(rec: SandboxRecord, live: LiveSandbox | undefined): Promise<void> {
    this.log('berth:broker', `sandbox ${rec.key} moved from backend ${rec.backend}; retiring its old record`);
    if (live !== undefined) await this.forget(live);
    if (rec.ephemeral && rec.ref !== '') {
      try {
        const old = await this.backends.get(rec.backend as BackendName);
        await old.remove(rec.ref, rec.hostDir ?? undefined);
      } catch (e) {
        this.log('berth:broker', `remove ${rec.key} on ${rec.backend}: ${String(e)}`);
      }
    }
    this.store.deleteSandbox(rec.digest);
  }

  /** After a failed call: whether the engine still has the sandbox's container, and running. */
  private async outOfBandState(live: LiveSandbox): Promise<'gone' | 'stopped' | undefined> {
    if (live.backend.kind !== 'container') return undefined;
    try {
      const found = (await live.backend.listManaged()).find((m) => m.ref === live.sandbox.ref);
      if (found === undefined) return 'gone';
      return found.running ? undefined : 'stopped';
    } catch {
      return undefined; // the engine itself is unreachable: report the original error
    }
  }

  /** After a shell could not start in a container: its pid count when (nearly) every pid is taken. */
  private async outOfProcesses(live: LiveSandbox): Promise<{ current: number; limit: number } | undefined> {
    if (live.backend.kind !== 'container') return undefined;
    const count = await live.sandbox.processCount?.();
    return count !== undefined && count.current >= count.limit - PIDS_HEADROOM ? count : undefined;
  }

  /**
   * The last resort when not even the warden could end what took every pid of a container (a
   * bomb that killed the warden, or one an earlier process left): restart it (the next call
   * starts it again). Returns the line that says so.
   */
  private async restartSandbox(call: ResolvedCall, live: LiveSandbox, full: { current: number; limit: number }): Promise<string> {
    const dirs = live.sandbox.volatileDirs ?? [];
    const notice = `berth: no new process could start in sandbox "${call.binding.sandboxKey}" (${full.current} of ${full.limit} pids in use), ` +
      `so it was restarted: every process in it was killed${dirs.length > 0 ? ` and ${dirs.join(', ')} (tmpfs) were emptied` : ''}\n`;
    this.log('berth:broker', notice.trim());
    await this.forget(live);
    await live.backend.stop(live.sandbox.ref);
    return notice;
  }

  /** Drops a live sandbox from memory (its shells are closed), e.g. after it vanished. */
  private async forget(live: LiveSandbox): Promise<void> {
    await this.closeShells(live);
    if (this.live.get(live.digest) === live) this.live.delete(live.digest);
  }

  private async removeSandbox(rec: SandboxRecord): Promise<void> {
    await this.locks.run(`sandbox:${rec.digest}`, async () => {
      const live = this.live.get(rec.digest);
      // A container takes its jobs with it; a host dir does not, so end them first.
      if (live?.backend.kind === 'host') await this.jobs.killAllIn(rec.digest, live.sandbox).catch((e) => this.log('berth:jobs', String(e)));
      if (live) await this.forget(live);
      if (rec.ref !== '') {
        const backend = await this.backends.get(rec.backend as BackendName);
        await backend.remove(rec.ref, rec.hostDir ?? undefined);
      }
      this.store.deleteSandbox(rec.digest);
    });
  }

  private idleMsFor(rec: SandboxRecord): number {
    return settingsFor(this.config, rec.profile ?? 'default').lifecycle.idleSeconds * 1000;
  }

  private sessionLive(s: { closedMs: number | null; lastSeenMs: number; owner: string | null }, rec: SandboxRecord): boolean {
    if (s.closedMs !== null) return false;
    if (s.owner !== null) return s.owner === this.owner || ownerAlive(s.owner);
    return Date.now() - s.lastSeenMs < this.idleMsFor(rec);
  }

  private hasLiveSession(rec: SandboxRecord): boolean {
    return this.store.sessionsOf(rec.digest).some((s) => this.sessionLive(s, rec));
  }

  /**
   * Backends this installation may have sandboxes on: those in use, those the config names and
   * those the store records (a fresh process has created none yet, but its orphans are there).
   */
  private async reapableBackends(): Promise<Backend[]> {
    const names = new Set<string>([this.config.base.backend, ...Object.values(this.config.profiles).map((p) => p.backend)]);
    for (const rec of this.store.listSandboxes()) names.add(rec.backend);
    const out = await this.backends.created();
    for (const name of names) {
      if (out.some((b) => b.name === name)) continue;
      try {
        out.push(await this.backends.get(name as BackendName));
      } catch {
        // A backend that cannot be created (not built yet) has no sandboxes to list.
      }
    }
    return out;
  }

  /**
   * Orphan reaper: this installation's sandboxes whose record is gone, or whose ephemeral sessions
   * are all closed, expired or held by a dead process, are removed (running or not) with their dirs.
   */
  async reapOrphans(backends?: Backend[]): Promise<string[]> {
    const removed: string[] = [];
    const reapable = backends ?? await this.reapableBackends();
    for (const backend of reapable) {
      let managed: ManagedSandbox[];
      try {
        managed = await backend.listManaged();
      } catch (e) {
        // One unreachable engine must not stop the reaper; the store-driven pass below still runs.
        this.log('berth:reaper', `list ${backend.name} sandboxes: ${String(e)}`);
        continue;
      }
      for (const m of managed) {
        const rec = this.store.getSandbox(m.digest);
        // A process that died while creating an ephemeral sandbox left a container and a claim with
        // no ref: both go. (A persistent one is adopted by the next call that claims it.)
        const abandoned = rec !== undefined && m.ephemeral && rec.ref === '' && claimAbandoned(rec, Date.now());
        if (rec === undefined || (rec.ref !== '' && rec.ref !== m.ref) || abandoned) {
          if (this.live.has(m.digest)) continue;
          await backend.remove(m.ref, undefined).catch((e) => this.log('berth:reaper', `remove ${m.name}: ${String(e)}`));
          if (abandoned) this.store.deleteSandbox(m.digest);
          removed.push(m.name);
        }
      }
    }
    for (const rec of this.store.listSandboxes()) {
      if (!rec.ephemeral || this.live.get(rec.digest)?.inflight) continue;
      if (rec.ref === '' && !claimAbandoned(rec, Date.now())) continue; // being created right now
      if (!this.hasLiveSession(rec)) {
        await this.removeSandbox(rec).catch((e) => this.log('berth:reaper', `remove ${rec.key}: ${String(e)}`));
        removed.push(rec.name);
      }
    }
    // Last, so the networks of the sandboxes just removed go too.
    for (const backend of reapable) {
      await backend.reapIdleNetworks?.().catch((e) => this.log('berth:reaper', `reap ${backend.name} networks: ${String(e)}`));
    }
    return removed;
  }

  /** Idle reaper + periodic orphan reaper; one at a time, and never after close() began. */
  private sweep(): Promise<void> {
    this.sweeping ??= this.sweepOnce()
      .catch((e: unknown) => this.log('berth:reaper', `sweep failed: ${String(e)}`))
      .finally(() => {
        this.sweeping = undefined;
      });
    return this.sweeping;
  }

  /** In-flight commands, busy shells, background jobs and running jobs all count as activity. */
  private async isIdle(live: LiveSandbox, now: number): Promise<boolean> {
    if (live.inflight > 0 || now - live.lastActivityMs < live.idleMs) return false;
    const shells = await Promise.all([...live.shells.values()].map((p) => p.catch(() => undefined)));
    if (shells.some((s) => s !== undefined && (s.shell.busy || s.shell.backgroundJobCount() > 0))) return false;
    if (await this.jobs.activeIn(live.digest, live.sandbox).catch(() => true)) return false;
    return live.inflight === 0;
  }

  /**
   * The disk bound (docker.diskMb): measures the sandboxes used since their last check, one at a
   * time, least recently checked first, for at most DISK_CHECK_BUDGET_MS per pass (the rest are
   * still due next pass), and stops any over its bound; its next call fails with
   * `disk_limit_exceeded`. Runs in the periodic sweep; returns the keys of the sandboxes it stopped.
   */
  async enforceDiskLimits(): Promise<string[]> {
    const stopped: string[] = [];
    const deadline = Date.now() + DISK_CHECK_BUDGET_MS;
    for (const live of [...this.live.values()].sort((a, b) => a.diskCheckedMs - b.diskCheckedMs)) {
      if (this.closing || Date.now() > deadline) break;
      if (live.backend.checkDiskLimit === undefined || !(await this.usedSinceDiskCheck(live))) continue;
      const checkedMs = Date.now();
      const breach = await live.backend.checkDiskLimit(live.sandbox)
        .catch((e: unknown) => void this.log('berth:reaper', `measure disk of ${live.record.key}: ${String(e)}`));
      live.diskCheckedMs = checkedMs;
      if (!breach) continue;
      this.log('berth:reaper', breach.message);
      // Marked before the stop, so a command it cuts short reports this error, not a dead shell.
      live.diskBreach = breach;
      await live.backend.stop(live.sandbox.ref).catch((e: unknown) => this.log('berth:reaper', `stop ${live.record.key}: ${String(e)}`));
      await this.forget(live);
      stopped.push(live.record.key);
    }
    return stopped;
  }

  private async usedSinceDiskCheck(live: LiveSandbox): Promise<boolean> {
    if (live.inflight > 0 || live.lastActivityMs >= live.diskCheckedMs) return true;
    if (this.store.runningJobsIn(live.digest).length > 0) return true;
    const shells = await Promise.all([...live.shells.values()].map((p) => p.catch(() => undefined)));
    return shells.some((s) => s !== undefined && s.shell.backgroundJobCount() > 0);
  }

  private async sweepOnce(): Promise<void> {
    await this.enforceDiskLimits().catch((e: unknown) => this.log('berth:reaper', `disk check failed: ${String(e)}`));
    for (const live of [...this.live.values()]) {
      if (this.closing) return;
      const now = Date.now();
      if (!(await this.isIdle(live, now)) || this.closing) continue;
      this.log('berth:reaper', `sandbox ${live.record.key} idle for ${Math.round((now - live.lastActivityMs) / 1000)}s`);
      if (live.record.ephemeral) {
        // Only this sandbox goes; a session is closed only once it has no other sandbox left,
        // so an idle sandbox never takes a busy one of the same session with it.
        const sessions = this.store.sessionsOf(live.digest).filter((x) => x.closedMs === null);
        await this.removeSandbox(live.record).catch((e) => this.log('berth:reaper', `remove ${live.record.key}: ${String(e)}`));
        for (const x of sessions) {
          if (!this.closing && this.store.sandboxCountOf(x.tenant, x.profile, x.session) === 0) {
            await this.closeSessionRef(x.tenant, x.profile, x.session).catch(() => undefined);
          }
        }
      } else {
        await this.forget(live);
        await live.backend.stop(live.record.ref).catch((e) => this.log('berth:reaper', `stop ${live.record.key}: ${String(e)}`));
      }
    }
    if (this.closing) return;
    this.pruneAudit();
    if (this.reap) await this.reapOrphans().catch((e) => this.log('berth:reaper', String(e)));
  }

  /** `audit.retentionDays`: entries older than that go (at open and on every sweep). */
  private pruneAudit(): void {
    try {
      this.store.pruneAudit(Date.now() - this.config.audit.retentionDays * 24 * 60 * 60 * 1000);
    } catch (e) {
      this.log('berth:audit', `pruning old audit entries failed: ${String(e)}`);
    }
  }
}

/**
 * A creation claim nobody will finish: its process is dead, or (a claim from before claims named
 * their process) it is older than CLAIM_STALE_MS.
 */
function claimAbandoned(rec: SandboxRecord, nowMs: number): boolean {
  if (rec.claimOwner !== undefined && rec.claimOwner !== null) return !ownerAlive(rec.claimOwner);
  return nowMs - rec.createdMs > CLAIM_STALE_MS;
}

function dockerSocketsOf(env: NodeJS.ProcessEnv): string[] {
  const dockerHost = env['DOCKER_HOST'];
  return dockerHost?.startsWith('unix://') ? [...DOCKER_SOCKETS, dockerHost.slice('unix://'.length)] : DOCKER_SOCKETS;
}

/** Errors of the caller's own making: reported as they are, even when a close overtook the call. */
const CALLER_ERRORS = new Set(['usage', 'policy_refused', 'too_large', 'path_not_found', 'session_closed']);

function sessionClosedError(call: ResolvedCall, cause?: unknown): BerthError {
  const session = call.scope.session !== undefined ? `session "${call.scope.session}"` : call.scope.task !== undefined ? `task "${call.scope.task}"` : 'the session';
  return new BerthError('session_closed',
    `${session} was closed while this call was running, and its sandbox went with it; run the call again to open the session anew`,
    cause === undefined ? undefined : { cause });
}

/**
 * The session refs of the subagents registered under the closing scope's task, and theirs
 * (aliases record each child's parent). A subagent registered with the closing session itself
 * goes with it; one registered under another session belongs to that conversation and is left.
 */
function subagentSessionRefs(store: StateStore, scope: CallScope, ref: string): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  const queue = [...(scope.task === undefined ? [] : [scope.task]), ...(scope.session === undefined ? [] : store.tasksOfSession(scope.tenant, scope.profile, scope.session))];
  while (queue.length > 0) {
    const parent = queue.shift() as string;
    if (seen.has(parent)) continue;
    seen.add(parent);
    for (const child of store.childrenOf(scope.tenant, scope.profile, parent)) {
      const childRef = child.session ?? `@task:${child.child}`;
      if (child.session !== null && child.session !== ref) continue;
      if (childRef !== ref && !out.includes(childRef)) out.push(childRef);
      queue.push(child.child);
    }
  }
  // Deepest last found: close grandchildren before children, children before the parent.
  return out.reverse();
}

function minIdleMs(config: BerthConfig): number {
  return Math.min(config.base.lifecycle.idleSeconds, ...Object.values(config.profiles).map((p) => p.lifecycle.idleSeconds)) * 1000;
}


/**
 * A call scope bound to a broker: what an agent framework holds per conversation.
 * `close()` ends the session (ephemeral sandboxes go away; persistent ones stay).
 */
export class SessionHandle implements AsyncDisposable {
  constructor(private readonly broker: Broker, readonly scope: CallScopeInput) {}

  exec(command: string, opts?: ExecOptions): Promise<BrokerExecResult> {
    return this.broker.exec(this.scope, command, opts);
  }

  explain(): Binding {
    return this.broker.explain(this.scope);
  }

  close(): Promise<CloseResult> {
    return this.broker.closeSession(this.scope);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
