import { BerthError } from '../errors.js';
import { ensurePrivateDir, stagingDirFor } from '../files/staging.js';
import type { StagingLedger } from '../files/staging-quota.js';
import { exportToStaging, mediaHostPath, readSandboxFile, uploadFile, uploadStream, uploadTarball, type TransferContext } from '../files/transfer.js';
import type { CallScopeInput } from '../scope/call-scope.js';
import type { AuditRecorder } from './audit.js';
import type { CallResolver } from './call-resolver.js';
import type { ResolvedCall } from './resolve-call.js';
import type { LiveSandbox, LiveSandboxes } from './live-sandboxes.js';
import type { SessionGate } from './session-gate.js';
import type { Logger } from '../logging/logger.js';

export interface BrokerFilesOptions {
  resolver: Pick<CallResolver, 'resolve'>;
  /** Registers each file call as a call of its session and gets its sandbox. */
  gate: Pick<SessionGate, 'run' | 'acquire'>;
  /** Counts each file call as one in flight on its sandbox. */
  lives: Pick<LiveSandboxes, 'enter' | 'leave'>;
  audit: Pick<AuditRecorder, 'record'>;
  /** Throws once the broker is shutting down. */
  lifecycle: { assertOpen(): void };
  berthHome: string;
  /** `limits.stagingBytes`: what one tenant's exports may hold in staging at once. */
  stagingBytes: number;
  /** Each tenant's exports in staging, against `stagingBytes`. */
  stagingLedger: StagingLedger;
  log: Logger;
}

/**
 * Files in and out of a call's sandbox (`broker.files`; bound to a scope as `session.files`).
 * Every call names its scope first; each one keeps the sandbox busy while it runs and is recorded
 * in the audit log.
 */
export class BrokerFiles {
  constructor(private readonly opts: BrokerFilesOptions) {}

  /**
   * Writes one file into the call's sandbox; `path` is absolute or relative to the shell's cwd.
   * Missing parent dirs are created. Over `files.maxBytes`, or on a refused path, nothing is written.
   *
   * @example
   * await broker.files.upload({ session: 's1' }, { path: '/workspace/data.csv', data: Buffer.from('a,b\n') });
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
   * await broker.files.uploadStream({ session: 's1' }, { path: '/workspace/data.csv', size, stream: createReadStream('data.csv') });
   */
  uploadStream(scope: CallScopeInput, a: { path: string; size: number; stream: AsyncIterable<Uint8Array>; mode?: number }): Promise<{ path: string; bytes: number }> {
    return this.fileCall(scope, 'upload', `upload ${a.path} (${a.size} bytes)`, (ctx) => uploadStream(ctx, a));
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
   * const { hostPath } = await broker.files.exportPath({ session: 's1' }, { path: '/workspace/report' });
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
   * const { hostPath } = await broker.files.mediaPath({ user: 'telegram:1' }, '/workspace/chart.png');
   */
  mediaPath(scope: CallScopeInput, sandboxPath: string): Promise<{ hostPath: string; exported: boolean }> {
    return this.fileCall(scope, 'media', `media ${sandboxPath}`, (ctx) => mediaHostPath(ctx, sandboxPath));
  }

  /** Runs one file operation in the call's sandbox (kept busy meanwhile) and records it in the audit log. */
  private async fileCall<T>(scope: CallScopeInput, kind: 'upload' | 'read' | 'export' | 'media', text: string, run: (ctx: TransferContext) => Promise<T>): Promise<T> {
    const { gate, lives } = this.opts;
    this.opts.lifecycle.assertOpen();
    const call = this.opts.resolver.resolve(scope);
    const started = Date.now();
    let failure: string | undefined = 'error';
    try {
      return await gate.run(call, async (sc) => {
        const live = await gate.acquire(call, sc);
        lives.enter(live);
        try {
          const r = await run(this.transferContext(call, live));
          failure = undefined;
          return r;
        } finally {
          lives.leave(live);
        }
      });
    } catch (err) {
      failure = err instanceof BerthError ? err.code : 'error';
      throw err;
    } finally {
      this.opts.audit.record({
        kind, call, command: failure === undefined ? text : `${text} [failed: ${failure}]`, exitCode: failure === undefined ? 0 : null, startedMs: started,
      });
    }
  }

  private transferContext(call: ResolvedCall, live: LiveSandbox): TransferContext {
    const { berthHome } = this.opts;
    const sandbox = live.sandbox;
    const roots = [...sandbox.fileRoots];
    // On local, an attached workspace is the session's starting dir and one of its roots.
    if (live.traits.hostPaths && !roots.some((r) => call.defaultCwd === r || call.defaultCwd.startsWith(`${r}/`))) roots.push(call.defaultCwd);
    return {
      sandbox,
      policy: { roots, home: sandbox.homeDir, berthDirs: [sandbox.stateDir] },
      cwd: call.binding.cwd || call.defaultCwd,
      maxBytes: call.settings.files.maxBytes,
      mediaMode: call.settings.files.mediaMode,
      staging: () => ensurePrivateDir(berthHome, stagingDirFor(berthHome, {
        tenant: call.scope.tenant, profile: call.scope.profile, user: call.scope.user, sessionRef: call.sessionRef,
      })),
      stagingLease: () => this.opts.stagingLedger.begin(call.scope.tenant, this.opts.stagingBytes),
      redactValues: call.redactValues,
      log: (m) => this.opts.log.child('berth:files').info(`${call.binding.sandboxKey}: ${m}`),
    };
  }
}
