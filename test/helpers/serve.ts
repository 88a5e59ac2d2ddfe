import { spawn, type ChildProcess } from 'node:child_process';
import { BERTH_BIN, REPO, runBerth } from './cli.js';

/*
 * A real `berth serve` process (the built dist/) on a free loopback port, and a small JSON client.
 * `stopAll()` in afterEach stops what a test left running, so no server outlives its test.
 */

export interface ServeInstall {
  env: NodeJS.ProcessEnv;
  dir: string;
}

const live = new Set<ServeProcess>();

export class ServeProcess {
  private exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stdout = '';
  stderr = '';

  private constructor(readonly child: ChildProcess, readonly url: string, exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>) {
    this.exited = exited;
  }

  /** Starts `berth serve --port 0` in the install's dir; resolves once it prints its URL. */
  static start(t: ServeInstall, args: string[] = [], timeoutMs = 30_000): Promise<ServeProcess> {
    const child = spawn(process.execPath, [BERTH_BIN, 'serve', '--port', '0', ...args], {
      cwd: t.dir, env: t.env, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
      child.on('exit', (code, signal) => resolve({ code, signal }));
    });
    return new Promise((resolve, reject) => {
      let server: ServeProcess | undefined;
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`berth serve did not start within ${timeoutMs} ms: ${out} ${err}`));
      }, timeoutMs);
      child.stdout!.setEncoding('utf8').on('data', (d: string) => {
        out += d;
        if (server) server.stdout += d;
        const m = /listening on (http:\/\/\S+)/.exec(out);
        if (m && server === undefined) {
          clearTimeout(timer);
          server = new ServeProcess(child, m[1] as string, exited);
          server.stdout = out;
          server.stderr = err;
          live.add(server);
          resolve(server);
        }
      });
      child.stderr!.setEncoding('utf8').on('data', (d: string) => {
        err += d;
        if (server) server.stderr += d;
      });
      void exited.then((x) => {
        if (server === undefined) {
          clearTimeout(timer);
          reject(new Error(`berth serve exited (${x.code ?? x.signal}) before listening: ${out} ${err}`));
        }
      });
    });
  }

  get pid(): number {
    return this.child.pid as number;
  }

  /** Sends `signal` and waits for the exit (SIGKILL after `timeoutMs`). */
  async stop(signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 30_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    live.delete(this);
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), timeoutMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  client(token: string | undefined): ApiClient {
    return new ApiClient(this.url, token);
  }

  /**
   * `await using server = await ServeProcess.start(t)` after `using t = tempInstall(…)`: the server
   * stops (SIGTERM) before the install is removed at the end of the test's block, not in afterEach
   * after it, when its shells may still be writing into the dirs being removed.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop('SIGTERM', 20_000);
  }
}

/**
 * Stops every server still running (afterEach), as an operator would: SIGTERM, so it ends its
 * shells and removes its ephemeral sandboxes, and SIGKILL only if it has not exited in 20 s.
 * afterEach runs before a test's own onTestFinished clean-ups: a server killed outright here
 * leaves its shells to end on their own, writing their state into dirs those clean-ups remove.
 */
export async function stopAll(): Promise<void> {
  await Promise.all([...live].map((s) => s.stop('SIGTERM', 20_000)));
}

/** `berth token create --tenant T [--profile P ...]`: the token is the last line of stdout. */
export async function createToken(t: ServeInstall, tenant: string, profiles: string[] = []): Promise<string> {
  const r = await runBerth(['token', 'create', '--tenant', tenant, ...profiles.flatMap((p) => ['--profile', p])], { env: t.env, cwd: t.dir ?? REPO });
  if (r.code !== 0) throw new Error(`berth token create failed (${r.code}): ${r.stderr}`);
  const lines = r.stdout.trim().split('\n');
  return lines[lines.length - 1] as string;
}

export interface ApiResponse<T = unknown> {
  status: number;
  body: T;
  headers: Headers;
}

/** JSON over fetch with the bearer token; never throws for an HTTP status. */
export class ApiClient {
  constructor(readonly url: string, readonly token: string | undefined) {}

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    return { ...(this.token ? { authorization: `Bearer ${this.token}` } : {}), ...extra };
  }

  async request<T = any>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<ApiResponse<T>> { // eslint-disable-line @typescript-eslint/no-explicit-any
    const res = await fetch(`${this.url}${path}`, {
      method,
      headers: this.headers(body === undefined ? headers : { 'content-type': 'application/json', ...headers }),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON: keep the text
    }
    return { status: res.status, body: parsed as T, headers: res.headers };
  }

  post<T = any>(path: string, body: unknown): Promise<ApiResponse<T>> { // eslint-disable-line @typescript-eslint/no-explicit-any
    return this.request<T>('POST', path, body);
  }

  get<T = any>(path: string): Promise<ApiResponse<T>> { // eslint-disable-line @typescript-eslint/no-explicit-any
    return this.request<T>('GET', path);
  }

  delete<T = any>(path: string): Promise<ApiResponse<T>> { // eslint-disable-line @typescript-eslint/no-explicit-any
    return this.request<T>('DELETE', path);
  }

  /** POST /v1/exec/stream, returning the SSE events in order. */
  async stream(body: unknown): Promise<{ status: number; events: { event: string; data: unknown }[] }> {
    const res = await fetch(`${this.url}/v1/exec/stream`, {
      method: 'POST', headers: this.headers({ 'content-type': 'application/json' }), body: JSON.stringify(body),
    });
    const text = await res.text();
    const events: { event: string; data: unknown }[] = [];
    for (const block of text.split('\n\n')) {
      if (block.trim() === '') continue;
      let event = 'message';
      let data = '';
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) event = line.slice(7);
        else if (line.startsWith('data: ')) data += line.slice(6);
      }
      events.push({ event, data: JSON.parse(data) as unknown });
    }
    return { status: res.status, events };
  }
}

/** Query string from defined values. */
export function qs(params: Record<string, string | number | undefined>): string {
  const parts = Object.entries(params).filter(([, v]) => v !== undefined).map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`);
  return parts.length === 0 ? '' : `?${parts.join('&')}`;
}
