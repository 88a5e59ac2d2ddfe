/**
 * `berth/client`: a typed client for a remote `berth serve`, with the library's session shape
 * (`exec`, streaming `exec`, `files`, `jobs`, `explain`, `close`) and its `BerthError` codes. It
 * loads neither the broker nor the server: only the server's schemas, for its types and to check
 * each answer.
 *
 * @example
 * ```ts
 * import { BerthClient } from 'berth/client';
 * const berth = new BerthClient({ url: 'http://127.0.0.1:7878', token: process.env.BERTH_TOKEN! });
 * await using chat = berth.session({ session: 'chat-42' });
 * const r = await chat.exec('npm test', { onChunk: (stream, text) => process.stdout.write(text) });
 * ```
 */
export { BerthClient } from './client/berth-client.js';
export type { BerthClientOptions } from './client/berth-client.js';
export { RemoteSession, RemoteFiles, RemoteJobs } from './client/remote-session.js';
export { RemoteCallError } from './client/remote-error.js';
export type {
  RemoteScope, RemoteExecOptions, RemoteExecResult, RemoteBinding, RemoteCloseResult, RemoteExport, RemoteJobRead, RemoteJobStarted,
  RemoteJobSummary, RemoteWritten,
} from './client/remote-types.js';
