import { UnsupportedError } from '../errors.js';
import { Binding, Closed, Export, JobKilled, JobRead, JobStarted, JobSummary, Written } from '../server/response-schemas.js';
import { remoteExec } from './remote-exec.js';
import type {
  RemoteBinding, RemoteCloseResult, RemoteExecOptions, RemoteExecResult, RemoteExport, RemoteJobRead, RemoteJobStarted, RemoteJobSummary, RemoteScope,
  RemoteWritten,
} from './remote-types.js';
import type { Transport } from './transport.js';

/** The scope as a query string carries it: `parentTask` only travels in a body (a subagent is registered by a call that has one). */
function queryScope(scope: RemoteScope): Record<string, string | undefined> {
  const { parentTask: _parentTask, ...rest } = scope;
  return rest;
}

/** A file mode cannot travel over HTTP: refused rather than dropped. */
function noMode(mode: number | undefined): void {
  if (mode !== undefined) {
    throw new UnsupportedError('a file mode cannot travel with an upload to the berth server (PUT /v1/files takes none): upload, then run chmod with exec');
  }
}

/** Files in and out of the remote session's sandbox, as `SessionFiles` moves them in the library. */
export class RemoteFiles {
  constructor(private readonly http: Transport, private readonly scope: RemoteScope) {}

  /** Writes `data` to `path` in the sandbox. */
  async upload(a: { path: string; data: Uint8Array; mode?: number }): Promise<RemoteWritten> {
    noMode(a.mode);
    return this.http.json('upload', Written, { query: { ...queryScope(this.scope), path: a.path }, bytes: a.data });
  }

  /** Streams `size` bytes to `path` as they come (the server writes them in as they arrive). */
  async uploadStream(a: { path: string; size: number; stream: AsyncIterable<Uint8Array>; mode?: number }): Promise<RemoteWritten> {
    noMode(a.mode);
    return this.http.json('upload', Written, { query: { ...queryScope(this.scope), path: a.path }, bytes: { stream: a.stream, size: a.size } });
  }

  /** Reads one sandbox file, at most `maxBytes` (never above the server's `files.maxBytes`). */
  async readFile(a: { path: string; maxBytes?: number }): Promise<{ path: string; data: Buffer }> {
    const res = await this.http.send('readFile', { query: { ...queryScope(this.scope), path: a.path, maxBytes: a.maxBytes } });
    const header = res.headers.get('x-berth-path');
    return { path: header === null ? a.path : decodeURIComponent(header), data: Buffer.from(await res.arrayBuffer()) };
  }

  /**
   * Exports a file or directory into the session's staging area on the server (the remote form of
   * `exportPath`, which answers a host path): fetch it with `download(exportId)`.
   */
  export(a: { path: string; maxBytes?: number }): Promise<RemoteExport> {
    return this.http.json('exportFile', Export, { json: { ...this.scope, path: a.path, maxBytes: a.maxBytes } });
  }

  /** The content of an export of this session: a file's bytes, or a directory as a tar. */
  async download(exportId: string): Promise<{ kind: 'file' | 'dir'; data: Buffer }> {
    const res = await this.http.send('download', { params: { id: exportId }, query: queryScope(this.scope) });
    return { kind: res.headers.get('x-berth-kind') === 'dir' ? 'dir' : 'file', data: Buffer.from(await res.arrayBuffer()) };
  }
}

/** Background jobs of the remote session, as `SessionJobs` runs them in the library. */
export class RemoteJobs {
  constructor(private readonly http: Transport, private readonly scope: RemoteScope) {}

  start(command: string, opts: { workdir?: string } = {}): Promise<RemoteJobStarted> {
    return this.http.json('startJob', JobStarted, { json: { ...this.scope, command, workdir: opts.workdir } });
  }

  read(jobId: string, opts: { offset?: number; maxBytes?: number } = {}): Promise<RemoteJobRead> {
    return this.http.json('readJob', JobRead, { params: { id: jobId }, query: { ...queryScope(this.scope), offset: opts.offset, maxBytes: opts.maxBytes } });
  }

  kill(jobId: string): Promise<{ killed: boolean }> {
    return this.http.json('killJob', JobKilled, { params: { id: jobId }, query: queryScope(this.scope) });
  }

  list(): Promise<RemoteJobSummary[]> {
    return this.http.json('listJobs', JobSummary.array(), { query: queryScope(this.scope) });
  }
}

/**
 * A call scope bound to a remote `berth serve`: the library's `SessionHandle` over HTTP. Commands,
 * files and jobs go to the scope's sandbox on the server; failures are the library's
 * `BerthError` codes. What differs is what HTTP cannot carry: `explain()` is a promise, exports
 * are downloaded rather than given as a host path, and no host path is ever answered.
 *
 * @example
 * ```ts
 * const berth = new BerthClient({ url: 'http://127.0.0.1:7878', token: process.env.BERTH_TOKEN! });
 * await using chat = berth.session({ session: 'chat-42' });
 * const r = await chat.exec('ls', { onChunk: (stream, text) => process.stdout.write(text) });
 * ```
 */
export class RemoteSession implements AsyncDisposable {
  /** Files in and out of the session's sandbox. */
  readonly files: RemoteFiles;
  /** Background jobs of the session. */
  readonly jobs: RemoteJobs;

  constructor(private readonly http: Transport, readonly scope: RemoteScope) {
    this.files = new RemoteFiles(http, scope);
    this.jobs = new RemoteJobs(http, scope);
  }

  exec(command: string, opts?: RemoteExecOptions): Promise<RemoteExecResult> {
    return remoteExec(this.http, this.scope, command, opts);
  }

  explain(): Promise<RemoteBinding> {
    return this.http.json('explain', Binding, { json: this.scope });
  }

  close(): Promise<RemoteCloseResult> {
    return this.http.json('closeSession', Closed, { json: this.scope });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
