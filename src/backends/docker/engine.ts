import type { Duplex } from 'node:stream';
import Dockerode from 'dockerode';
import { BackendUnavailableError, BerthError, SandboxNotFoundError } from '../../errors.js';

/**
 * A client for the engine named by `DOCKER_HOST`, or the default socket. Creating it does no I/O.
 * Only the composition root (or a test) should call this; everything else receives a client.
 */
export function defaultDocker(env: NodeJS.ProcessEnv = process.env): Dockerode {
  // Without DOCKER_HOST, name the default socket explicitly: left to itself the client falls back
  // to tcp://localhost when the socket file is missing, and the error would name the wrong place.
  return env['DOCKER_HOST'] ? new Dockerode() : new Dockerode({ socketPath: '/var/run/docker.sock' });
}

/** Where a client talks to, for error messages: `unix:///var/run/docker.sock`, `tcp://h:2375`. */
export function describeEndpoint(docker: Dockerode): string {
  const modem = docker.modem as { socketPath?: unknown; host?: unknown; port?: unknown; protocol?: unknown };
  if (typeof modem.socketPath === 'string' && modem.socketPath !== '') return `unix://${modem.socketPath}`;
  const protocol = typeof modem.protocol === 'string' ? modem.protocol : 'http';
  const host = typeof modem.host === 'string' ? modem.host : 'localhost';
  const port = typeof modem.port === 'string' || typeof modem.port === 'number' ? `:${modem.port}` : '';
  return `${protocol === 'http' ? 'tcp' : protocol}://${host}${port}`;
}

/** HTTP status of an engine error (dockerode sets `statusCode`), or undefined for transport errors. */
export function statusOf(err: unknown): number | undefined {
  if (typeof err === 'object' && err !== null && 'statusCode' in err) {
    const status = (err as { statusCode: unknown }).statusCode;
    if (typeof status === 'number') return status;
  }
  return undefined;
}

const UNREACHABLE_CODES = new Set([
  'ENOENT',
  'ECONNREFUSED',
  'ECONNRESET',
  'EACCES',
  'EPERM',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
  'ENOTSOCK',
]);

/** True for errors of the connection itself (no engine answered), as opposed to API errors. */
function isUnreachable(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && UNREACHABLE_CODES.has(code) && statusOf(err) === undefined;
}

export function unavailableError(docker: Dockerode, err: unknown): BackendUnavailableError {
  const endpoint = describeEndpoint(docker);
  const code = (err as { code?: unknown } | null)?.code;
  const reason = typeof code === 'string' ? code : err instanceof Error ? err.message : String(err);
  const fix =
    code === 'EACCES' || code === 'EPERM'
      ? 'give this user access to the socket (add it to the "docker" group) or set DOCKER_HOST'
      : 'start the engine (systemctl start docker, or run dockerd) or set DOCKER_HOST to a running engine';
  return new BackendUnavailableError(`docker engine not reachable at ${endpoint} (${reason}); ${fix}`, {
    cause: err,
  });
}

export function imageMissingError(image: string, err?: unknown): SandboxNotFoundError {
  return new SandboxNotFoundError(
    `docker image "${image}" not found; run "berth image build" (or set docker.image)`,
    err === undefined ? undefined : { cause: err },
  );
}

/**
 * The docker boundary's one error translator: connection failures become
 * `BackendUnavailableError`; berth's own errors pass through; anything else is wrapped with
 * what was being done.
 */
export function fromDockerError(docker: Dockerode, err: unknown, doing: string): BerthError {
  if (err instanceof BerthError) return err;
  if (isUnreachable(err)) return unavailableError(docker, err);
  const status = statusOf(err);
  const detail = engineMessage(err);
  if (status === 404 && /no such container/i.test(detail)) {
    // The container was removed behind berth's back; callers re-ensure (recreate) on this type.
    return new SandboxNotFoundError(`container is gone, could not ${doing}: ${detail}`, { cause: err });
  }
  return new BerthError('engine_refused', `docker engine refused to ${doing}${status ? ` (HTTP ${status})` : ''}: ${detail}`, {
    cause: err,
  });
}

/** The engine's own message (`json.message`) or the error text. */
export function engineMessage(err: unknown): string {
  if (typeof err === 'object' && err !== null) {
    const json = (err as { json?: unknown }).json;
    if (typeof json === 'object' && json !== null && typeof (json as { message?: unknown }).message === 'string') {
      return (json as { message: string }).message;
    }
    if (err instanceof Error) return err.message;
  }
  return String(err);
}

/** Reject with `onTimeout()` when `promise` has not settled within `timeoutMs`; the timer is always cleared. */
export async function withTimeout<T>(promise: Promise<T>, timeoutMs: number, onTimeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Bound of a ping or an `info`: an engine answers these in milliseconds. */
export const PING_TIMEOUT_MS = 5_000;
/**
 * Bound of any other single engine request (inspect, list, create, start, stop, a forced remove).
 * Generous on purpose: on a loaded host (load 50 on 2 cores) a container start was seen taking
 * over 30 s, and a slow answer must not fail a call; the bound is there for an engine that never answers.
 */
export const ENGINE_REQUEST_TIMEOUT_MS = 120_000;

/** An engine that accepted the connection and did not answer in time. */
function noAnswerError(docker: Dockerode, timeoutMs: number, doing: string, cause?: unknown): BackendUnavailableError {
  return new BackendUnavailableError(
    `docker engine at ${describeEndpoint(docker)} did not answer within ${timeoutMs / 1000} s (asked to ${doing}); ` +
      'check that it is healthy ("docker info"), restart it, or set DOCKER_HOST to a running engine',
    cause === undefined ? undefined : { cause },
  );
}

/**
 * Runs one engine request with a deadline: `request` passes the signal to dockerode as
 * `abortSignal`, which destroys the request when the engine has not answered in time. Racing a
 * timer instead would leave the request open, and an engine that accepts and never answers would
 * hold the call (and the CLI process) for good. Not for streams that live as long as a command
 * (a shell's attach socket, an archive): see `startAttached`.
 */
export async function bounded<T>(
  docker: Dockerode,
  timeoutMs: number,
  doing: string,
  request: (abortSignal: AbortSignal) => Promise<T>,
): Promise<T> {
  const abortSignal = AbortSignal.timeout(timeoutMs);
  try {
    return await request(abortSignal);
  } catch (err) {
    if (abortSignal.aborted) throw noAnswerError(docker, timeoutMs, doing, err);
    throw err;
  }
}

/**
 * Opens a hijacked socket onto a process's streams (an exec's start, a container's attach). Only
 * the wait for the engine to hand over the socket is bounded: the socket itself then lives as long
 * as the process does (a shell for hours), so no request timeout may reach it.
 */
export async function hijacked(docker: Dockerode, doing: string, open: (abortSignal: AbortSignal) => Promise<unknown>): Promise<Duplex> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), ENGINE_REQUEST_TIMEOUT_MS);
  try {
    return (await open(controller.signal)) as Duplex;
  } catch (err) {
    if (controller.signal.aborted) throw noAnswerError(docker, ENGINE_REQUEST_TIMEOUT_MS, doing, err);
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/** `GET /images/{name}/json` with a signal (dockerode's `Image.inspect` passes none on). */
export function inspectImage(docker: Dockerode, image: string, abortSignal: AbortSignal): Promise<Dockerode.ImageInspectInfo> {
  return new Promise((resolve, reject) => {
    const modem = docker.modem as { dial(opts: unknown, cb: (err: unknown, data: unknown) => void): void };
    modem.dial({
      path: `/images/${image}/json`, method: 'GET', abortSignal, options: {},
      statusCodes: { 200: true, 404: 'no such image', 500: 'server error' },
    }, (err, data) => (err ? reject(err) : resolve(data as Dockerode.ImageInspectInfo)));
  });
}

/** dockerode's `ping` and `info` take options (`abortSignal`) at run time; its type definitions omit them. */
export function engineInfo(docker: Dockerode): {
  ping(opts: { abortSignal: AbortSignal }): Promise<unknown>;
  info(opts: { abortSignal: AbortSignal }): Promise<Record<string, unknown>>;
} {
  return docker as unknown as ReturnType<typeof engineInfo>;
}

/**
 * A sandbox whose main process (berth's warden, a bash) ended as it started: most often an image
 * with no bash on its PATH (the init exits 127), which the shells need as well.
 */
export function endedAtStart(image: string, state: Dockerode.ContainerInspectInfo['State']): BerthError {
  const why = state.ExitCode === 127 ? `image "${image}" has no bash on its PATH` : `its main process (bash) exited with ${state.ExitCode}`;
  return new BerthError('sandbox_start_failed', `the sandbox stopped as soon as it started: ${why}${state.Error ? ` (${state.Error})` : ''}; ` +
    'berth runs bash in every sandbox: use an image that has it (berth image build makes one)');
}
