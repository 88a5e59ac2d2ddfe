import type { Duplex } from 'node:stream';
import { PassThrough } from 'node:stream';
import type Dockerode from 'dockerode';
import type { WebSocket } from 'ws';
import { demultiplex } from '../../src/backends/docker/exec-stream.js';
import { execInternalError, execStatus, type StatusBody } from './status.js';

/*
 * One pods/exec WebSocket bridged to one `docker exec`, with the framing of the Kubernetes
 * remotecommand WebSocket protocols (k8s.io/apimachinery wsstream, the kubelet's and the API
 * server's `createWebSocketStreams`):
 *
 * - every binary message starts with its channel byte: 0 stdin, 1 stdout, 2 stderr, 3 status
 *   (error), 4 resize; on `v5.channel.k8s.io` a client message [255, n] closes its stream n
 *   (only stdin is honoured, as the API server does);
 * - right after the upgrade the server sends an empty message on the lowest writable channel
 *   (stdout, else stderr, else status) "to notify the client the connection is established";
 * - when the process ends, the status channel carries one metav1.Status JSON (v4 and v5), then
 *   the server closes the connection. The server never sends 255 itself.
 */

export const CHANNEL = { stdin: 0, stdout: 1, stderr: 2, status: 3, resize: 4, close: 255 } as const;

export interface ExecRequest {
  argv: string[];
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  tty: boolean;
}

export interface ExecBridge {
  /** Send a raw message to the client (protocol misbehaviour on demand). */
  sendRaw(data: Buffer): void;
  /** Stop reading the client and answering its pings, and stop forwarding output: a silently dead connection. */
  freeze(): void;
  /** Cut the TCP connection without a status or close frame. */
  drop(): void;
  readonly done: Promise<void>;
}

function frame(channel: number, data: Buffer = Buffer.alloc(0)): Buffer {
  return Buffer.concat([Buffer.from([channel]), data]);
}

/** Runs `req` in `containerId` and serves it on `ws` (already upgraded with `protocol`). */
export function bridgeExec(docker: Dockerode, containerId: string, ws: WebSocket, protocol: string, req: ExecRequest): ExecBridge {
  let frozen = false;
  let socket: Duplex | undefined;
  const send = (channel: number, data?: Buffer): void => {
    if (!frozen && ws.readyState === ws.OPEN) ws.send(frame(channel, data));
  };
  const finish = (status: StatusBody): void => {
    send(CHANNEL.status, Buffer.from(JSON.stringify(status)));
    if (!frozen) ws.close(1000);
  };
  if (req.stdout) send(CHANNEL.stdout);
  else if (req.stderr) send(CHANNEL.stderr);
  else send(CHANNEL.status);

  const pendingStdin: Buffer[] = [];
  let stdinClosed = false;
  let clientGone = false;
  // A client that goes away closes the process's streams, as the API server does.
  ws.once('close', () => {
    clientGone = true;
    socket?.destroy();
  });
  ws.on('message', (data: Buffer, isBinary: boolean) => {
    if (!isBinary || data.length === 0) return;
    const channel = data[0];
    if (channel === CHANNEL.close && protocol === 'v5.channel.k8s.io') {
      if (data.length === 2 && data[1] === CHANNEL.stdin) {
        stdinClosed = true;
        socket?.end();
      }
      return;
    }
    if (channel !== CHANNEL.stdin || !req.stdin) return;
    if (socket === undefined) pendingStdin.push(data.subarray(1));
    else socket.write(data.subarray(1));
  });

  const done = (async () => {
    let exec: Dockerode.Exec;
    try {
      exec = await docker.getContainer(containerId).exec({
        Cmd: req.argv,
        AttachStdin: req.stdin,
        AttachStdout: req.stdout,
        AttachStderr: req.stderr,
        Tty: req.tty,
      });
      socket = (await exec.start({ hijack: true, stdin: req.stdin })) as unknown as Duplex;
    } catch (err) {
      finish(execInternalError((err as Error).message));
      return;
    }
    if (clientGone) {
      socket.destroy();
      return;
    }
    for (const chunk of pendingStdin.splice(0)) socket.write(chunk);
    if (stdinClosed) socket.end();
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    stdout.on('data', (c: Buffer) => send(CHANNEL.stdout, c));
    stderr.on('data', (c: Buffer) => send(CHANNEL.stderr, c));
    const ended = Promise.all([new Promise((r) => stdout.once('end', r)), new Promise((r) => stderr.once('end', r))]);
    if (req.tty) socket.pipe(stdout);
    else demultiplex(socket as unknown as import('node:stream').Readable, stdout, stderr);
    await ended;
    if (ws.readyState !== ws.OPEN) return;
    const info = await exec.inspect().catch(() => undefined);
    if (info === undefined || info.ExitCode === null) finish(execInternalError('the runtime did not report an exit code'));
    else finish(execStatus(req.argv, info.ExitCode));
  })();

  return {
    done,
    sendRaw(data: Buffer): void {
      ws.send(data);
    },
    freeze(): void {
      frozen = true;
      // Not reading the socket also means not answering pings.
      (ws as unknown as { _socket: import('node:net').Socket })._socket.pause();
    },
    drop(): void {
      (ws as unknown as { _socket: import('node:net').Socket })._socket.destroy();
    },
  };
}
