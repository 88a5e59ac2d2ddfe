import { randomBytes } from 'node:crypto';
import { PassThrough, Writable } from 'node:stream';
import type { V1Status } from '@kubernetes/client-node';
import type { WebSocket } from 'ws';
import { BackendUnavailableError, BerthError, ConfigError, SandboxNotFoundError, UnsupportedError } from '../../errors.js';
import { SHELL_TAG_VAR } from '../../shell/protocol.js';
import type { ShellTransport } from '../../shell/transport.js';
import type { SpawnOptions } from '../backend.js';
import type { KubeClient } from './kube-client.js';
import { planSpawn } from './spawn-prelude.js';
import { TLS_REMEDY, tlsFailure } from './tls-failure.js';

/*
 * One process in a pod over one pods/exec WebSocket (the client's `Exec`, subprotocols
 * v5..v1.channel.k8s.io; channel 0 stdin, 1 stdout, 2 stderr, 3 status). Env and cwd go in on
 * stdin (spawn-prelude.ts). The exit code comes from the status channel; a connection that ends
 * without a status was dropped (an API server or kubelet restart, an idle timeout), and one that
 * stops answering pings is cut, because the JS client sends none and a half-open TCP connection
 * would otherwise never end: either way the streams end and `ended` says `dropped`, so a
 * persistent shell on it is replaced. Stdin frames are sent directly with the socket's
 * callback, so a writer feels backpressure (the client's own stdin piping has none).
 */

const V5_PROTOCOL = 'v5.channel.k8s.io';

const STDIN_CHANNEL = 0;
const CLOSE_SIGNAL = 255;

/** How an exec ended. */
export type ExecEnd =
  | { kind: 'exited'; code: number }
  /** The runtime could not run the command (an InternalError status: no /bin/sh, say). */
  | { kind: 'failed'; message: string }
  /** The connection ended or was cut without a status. */
  | { kind: 'dropped'; reason: string };

/** Where a process runs: one container of one pod. */
export interface ExecTarget {
  client: KubeClient;
  pod: string;
  container: string;
}

/** The seam's spawn options, and how the exec connection behaves. */
export interface PodSpawnOptions extends SpawnOptions {
  /** Ping interval; a connection that answered nothing for a whole interval is cut. Default 30 s. */
  heartbeatMs?: number;
  /** Bound on the WebSocket upgrade. Default 30 s. */
  connectTimeoutMs?: number;
  log?: (msg: string) => void;
}

/** A process in a pod: a ShellTransport plus how it ended and the negotiated subprotocol. */
export interface PodProcess extends ShellTransport {
  readonly protocol: string;
  /** The kill-by-tag value in the process's environment (`BERTH_SHELL_TAG`). */
  readonly tag: string;
  readonly ended: Promise<ExecEnd>;
  /** Cut the connection only: nothing in the container is ended (see `kill`). Idempotent. */
  close(): void;
}

const DEFAULT_HEARTBEAT_MS = 30_000;
const DEFAULT_CONNECT_TIMEOUT_MS = 30_000;
const KILL_TIMEOUT_MS = 5_000;

/** Exit code of a status frame (kubelet ServeExec: Success, or NonZeroExitCode with an ExitCode cause). */
function endOfStatus(status: V1Status): ExecEnd {
  if (status.status === 'Success') return { kind: 'exited', code: 0 };
  if (status.reason === 'NonZeroExitCode') {
    const cause = status.details?.causes?.find((c) => c.reason === 'ExitCode');
    const code = Number(cause?.message);
    if (Number.isInteger(code)) return { kind: 'exited', code };
  }
  return { kind: 'failed', message: status.message ?? JSON.stringify(status) };
}

function frame(channel: number, data: Buffer): Buffer {
  return Buffer.concat([Buffer.from([channel]), data]);
}

function connectError(target: ExecTarget, argv0: string, err: unknown): BerthError {
  const message = (err as { message?: string }).message ?? String(err);
  const code = /Unexpected server response: (\d+)/.exec(message)?.[1];
  const doing = `start ${JSON.stringify(argv0)} in pod ${target.pod}`;
  if (code === '404') return new SandboxNotFoundError(`kubernetes: could not ${doing}: the pod does not exist (404)`, { cause: err });
  if (code === '401' || code === '403') {
    return new BerthError('engine_refused', `kubernetes: could not ${doing}: pods/exec was refused (${code}); apply deploy/rbac.yaml (pods/exec create and get)`, { cause: err });
  }
  if (code !== undefined) return new BerthError('engine_refused', `kubernetes: could not ${doing}: the API server answered ${code}`, { cause: err });
  const tls = tlsFailure(err);
  if (tls !== undefined) {
    return new ConfigError(`kubernetes: could not ${doing}: berth does not trust the TLS certificate of the API server at ${target.client.server} (${tls}); ${TLS_REMEDY}`, { cause: err });
  }
  return new BackendUnavailableError(`kubernetes: could not ${doing} through ${target.client.server}: ${message}`, { cause: err });
}

async function connect(target: ExecTarget, command: string[], stdout: PassThrough, stderr: PassThrough, onStatus: (s: V1Status) => void, timeoutMs: number): Promise<WebSocket> {
  // Never written: passing a stream makes the client ask for stdin; frames go out through ws.send.
  const clientStdin = new PassThrough();
  const opening = target.client.exec.exec(target.client.namespace, target.pod, target.container, command, stdout, stderr, clientStdin, false, onStatus);
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no WebSocket upgrade within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return (await Promise.race([opening, timedOut])) as unknown as WebSocket;
  } catch (err) {
    void opening.then((ws) => ws.close(), () => undefined);
    throw connectError(target, command[6] ?? '', err);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The client answers a [255, n] message from the server by ending its *default* streams, which
 * are berth's own process.stdin/stdout/stderr, not this exec's. An API server never sends one
 * (the close signal goes from client to server only), so such a message is dropped, not obeyed.
 */
function dropCloseSignals(ws: WebSocket, log: (msg: string) => void): void {
  const handler = ws.onmessage;
  ws.onmessage = (event) => {
    const data = event.data;
    if (Buffer.isBuffer(data) && data.length > 0 && data[0] === CLOSE_SIGNAL) {
      log('ignored a stream close signal sent by the server');
      return;
    }
    handler?.call(ws, event);
  };
}

/**
 * Start `argv` in the target container. `env` and `cwd` reach the process's own environment
 * and working directory through the stdin prelude, never argv; `env[BERTH_SHELL_TAG]` (or a
 * fresh tag) is what `kill()` looks for.
 */
export async function spawnInPod(target: ExecTarget, argv: readonly string[], opts: PodSpawnOptions): Promise<PodProcess> {
  const log = opts.log ?? (() => undefined);
  const tag = opts.env[SHELL_TAG_VAR] ?? randomBytes(9).toString('base64url');
  const plan = planSpawn({ argv, env: { ...opts.env, [SHELL_TAG_VAR]: tag }, cwd: opts.cwd, stdin: opts.stdin });
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let status: V1Status | undefined;
  const ws = await connect(target, plan.command, stdout, stderr, (s) => (status = s), opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS);
  const protocol = ws.protocol;
  dropCloseSignals(ws, (msg) => log(`exec stream of pod ${target.pod}: ${msg}`));

  let dropReason = 'the connection closed without an exit status';
  const ended = new Promise<ExecEnd>((resolve) => {
    ws.once('close', () => {
      clearInterval(heartbeat);
      // The client ends both streams on a status frame; on a drop nobody else will.
      stdout.end();
      stderr.end();
      resolve(status === undefined ? { kind: 'dropped', reason: dropReason } : endOfStatus(status));
    });
  });
  ws.on('error', (err: Error) => log(`exec stream of pod ${target.pod}: ${err.message}`));

  let alive = true;
  ws.on('pong', () => (alive = true));
  ws.on('message', () => (alive = true));
  const heartbeat = setInterval(() => {
    if (!alive) {
      dropReason = `no answer (data or pong) within ${opts.heartbeatMs ?? DEFAULT_HEARTBEAT_MS} ms; the connection was cut`;
      log(`exec stream of pod ${target.pod}: ${dropReason}`);
      ws.terminate();
      return;
    }
    alive = false;
    ws.ping();
  }, opts.heartbeatMs ?? DEFAULT_HEARTBEAT_MS);
  heartbeat.unref();

  const send = (data: Buffer, callback: (err?: Error | null) => void): void => {
    if (ws.readyState !== ws.OPEN) {
      callback(new Error(`the exec stream of pod ${target.pod} is closed`));
      return;
    }
    ws.send(data, callback);
  };
  send(frame(STDIN_CHANNEL, plan.prelude), (err) => err && log(`prelude to pod ${target.pod}: ${err.message}`));
  if (!opts.stdin && protocol === V5_PROTOCOL) send(Buffer.from([CLOSE_SIGNAL, STDIN_CHANNEL]), () => undefined);

  const stdin = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      if (!opts.stdin) callback(new Error('this process was started without stdin'));
      else send(frame(STDIN_CHANNEL, chunk), callback);
    },
    final(callback) {
      if (!opts.stdin) return callback();
      // Only v5 can close stdin alone; on v4 the client's only way is to close the whole connection.
      if (protocol !== V5_PROTOCOL) {
        return callback(new UnsupportedError(`the API server at ${target.client.server} speaks ${protocol || 'an old exec protocol'}, which cannot close a process's stdin; berth needs ${V5_PROTOCOL} (Kubernetes 1.30 or later)`));
      }
      send(Buffer.from([CLOSE_SIGNAL, STDIN_CHANNEL]), callback);
    },
  });
  // A write racing the stream's end must not crash the process; `ended` reports what happened.
  stdin.on('error', (err) => log(`stdin of pod ${target.pod}: ${err.message}`));

  let killing: Promise<void> | undefined;
  const kill = (): Promise<void> => {
    killing ??= (async () => {
      try {
        await killTagged(target, tag, log);
      } catch (err) {
        log(`could not kill the processes of tag ${tag} in pod ${target.pod}: ${(err as Error).message}`);
      }
      ws.terminate();
      stdin.destroy();
    })();
    return killing;
  };

  const exited = ended.then((e) => (e.kind === 'exited' ? e.code : null));
  const close = (): void => {
    ws.terminate();
    stdin.destroy();
  };
  return { stdin, stdout, stderr, exited, kill, close, ended, protocol, tag };
}

/**
 * Ends every process in the container whose environment carries `BERTH_SHELL_TAG=<tag>`: the
 * spawned process and whatever inherited its environment, however it detached (closing an exec
 * stream ends nothing in the container). Two passes catch children forked during the first.
 * `/bin/sh` by absolute path, so an `sh` earlier on the agent's PATH cannot stand in for it.
 */
const KILL_BY_TAG_SCRIPT =
  'for pass in 1 2; do for f in $(grep -zlxF -s "$1=$2" /proc/[0-9]*/environ 2>/dev/null); do ' +
  'p=${f#/proc/}; kill -9 "${p%/environ}" 2>/dev/null; done; done; true';

async function killTagged(target: ExecTarget, tag: string, log: (msg: string) => void): Promise<void> {
  const killer = await spawnInPod(target, ['/bin/sh', '-c', KILL_BY_TAG_SCRIPT, 'berth-kill', SHELL_TAG_VAR, tag], { env: {}, stdin: false, log });
  killer.stdout.resume();
  killer.stderr.resume();
  let timer: NodeJS.Timeout | undefined;
  const end = await Promise.race([
    killer.ended,
    new Promise<ExecEnd>((resolve) => (timer = setTimeout(() => resolve({ kind: 'dropped', reason: `no exit status within ${KILL_TIMEOUT_MS} ms` }), KILL_TIMEOUT_MS))),
  ]);
  clearTimeout(timer);
  if (end.kind !== 'exited') {
    killer.close();
    throw new Error(end.kind === 'failed' ? end.message : end.reason);
  }
}
