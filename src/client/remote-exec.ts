import { BackendUnavailableError, UsageError } from '../errors.js';
import { ExecResult } from '../server/response-schemas.js';
import { errorOfAnswer } from './remote-error.js';
import type { RemoteExecOptions, RemoteExecResult, RemoteScope } from './remote-types.js';
import { sseEvents } from './sse-events.js';
import { answerShape, type Transport } from './transport.js';

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * One command through `POST /v1/exec`, or through `POST /v1/exec/stream` when the caller asked for
 * its chunks (`onChunk`): the chunks go to the callback in arrival order, then the `result` event
 * is the result, as the library's streaming exec gives it.
 */
export async function remoteExec(http: Transport, scope: RemoteScope, command: string, opts: RemoteExecOptions = {}): Promise<RemoteExecResult> {
  const json = { ...scope, command, timeoutSeconds: opts.timeoutSeconds, workdir: opts.workdir, stdin: stdinText(opts.stdin) };
  if (opts.onChunk === undefined) return http.json('exec', ExecResult, { json, signal: opts.signal });
  const res = await http.send('execStream', { json, signal: opts.signal, accept: 'text/event-stream' });
  if (res.body === null) throw new BackendUnavailableError('POST /v1/exec/stream answered no event stream: the berth server or a proxy in between ended it');
  try {
    for await (const e of sseEvents(res.body)) {
      if (e.event === 'stdout' || e.event === 'stderr') opts.onChunk(e.event, JSON.parse(e.data) as string);
      else if (e.event === 'result') return answerShape(ExecResult, JSON.parse(e.data), 'POST /v1/exec/stream');
      else if (e.event === 'error') {
        const body = JSON.parse(e.data) as { error: { status?: number } };
        throw errorOfAnswer(body.error.status ?? 500, body, 'POST /v1/exec/stream');
      }
    }
  } catch (err) {
    if (opts.signal?.aborted === true) throw opts.signal.reason;
    throw err;
  }
  throw new BackendUnavailableError('POST /v1/exec/stream ended before the command\'s result: the berth server stopped or the connection was cut; the command may have run');
}

/** stdin travels as a JSON string: bytes that are not UTF-8 text cannot. */
function stdinText(stdin: string | Uint8Array | undefined): string | undefined {
  if (stdin === undefined || typeof stdin === 'string') return stdin;
  try {
    return strictUtf8.decode(stdin);
  } catch {
    throw new UsageError('stdin over HTTP is UTF-8 text and these bytes are not: upload them as a file (files.upload) and redirect from it');
  }
}
