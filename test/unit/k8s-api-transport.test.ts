import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { KubeConfig } from '@kubernetes/client-node';
import { ApiTransport } from '../../src/backends/kubernetes/api-transport.js';
import { fromKubeError, kubeClient, type KubeClient } from '../../src/backends/kubernetes/kube-client.js';
import { DEFAULT_RETRY_POLICY, retryAfterMs, retryDelayMs, shouldRetry } from '../../src/backends/kubernetes/retry-policy.js';

/*
 * berth's API transport against a plain HTTP server on loopback that answers as an API server
 * would (the stand-in's flow control is exercised end to end in test/e2e/k8s-api-citizen.test.ts).
 * Retries wait through an injected sleep that records each delay, so nothing here is timed.
 */

const POD = JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'ns' } });

function status(code: number, reason: string): string {
  return JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: `${reason} (test)`, reason, code });
}

interface Fake {
  server: Server;
  url: string;
  connections: number;
  requests: { method: string; path: string }[];
}

let fake: Fake | undefined;

async function fakeApiServer(answer: (req: IncomingMessage, res: ServerResponse, n: number) => void): Promise<Fake> {
  const f: Fake = { server: createServer(), url: '', connections: 0, requests: [] };
  f.server.on('connection', () => f.connections++);
  f.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    f.requests.push({ method: req.method ?? '', path: new URL(req.url ?? '/', 'http://x').pathname });
    req.resume();
    req.once('end', () => answer(req, res, f.requests.length));
  });
  await new Promise<void>((resolve) => f.server.listen(0, '127.0.0.1', resolve));
  f.url = `http://127.0.0.1:${(f.server.address() as AddressInfo).port}`;
  fake = f;
  return f;
}

afterEach(async () => {
  fake?.server.closeAllConnections();
  await new Promise((resolve) => fake?.server.close(resolve) ?? resolve(undefined));
  fake = undefined;
});

function clientOf(url: string, opts: ConstructorParameters<typeof ApiTransport>[1] = {}): { client: KubeClient; slept: number[] } {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: url, skipTLSVerify: true }],
    users: [{ name: 'u', token: 't' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  const slept: number[] = [];
  const transport = new ApiTransport(kc, { sleep: async (ms) => void slept.push(ms), random: () => 0.5, ...opts });
  return { client: kubeClient(kc, 'ns', transport), slept };
}

const reply = (res: ServerResponse, code: number, body: string, headers: Record<string, string> = {}): void => {
  res.writeHead(code, { 'content-type': 'application/json', ...headers });
  res.end(body);
};

describe('kubernetes API transport', () => {
  it('sends every request of a client over one kept-alive connection', async () => {
    const f = await fakeApiServer((_req, res) => reply(res, 200, POD));
    const { client } = clientOf(f.url);
    for (let i = 0; i < 5; i++) await client.core.readNamespacedPod({ namespace: 'ns', name: 'p' });
    expect(f.requests).toHaveLength(5);
    expect(f.connections).toBe(1);
    client.transport.close();
  });

  it('a 429 is sent again after its Retry-After (plus jitter), for a create too', async () => {
    const f = await fakeApiServer((_req, res, n) => (n === 1 ? reply(res, 429, status(429, 'TooManyRequests'), { 'retry-after': '2' }) : reply(res, 201, POD)));
    const { client, slept } = clientOf(f.url);
    const pod = await client.core.createNamespacedPod({ namespace: 'ns', body: { metadata: { name: 'p' } } });
    expect(pod.metadata?.name).toBe('p');
    expect(f.requests.map((r) => r.method)).toEqual(['POST', 'POST']);
    expect(slept).toHaveLength(1);
    expect(slept[0]).toBeGreaterThanOrEqual(2000);
  });

  it('a 503 is retried for reads and idempotent creates, never for a plain create (it may have been done)', async () => {
    const f = await fakeApiServer((_req, res, n) => (n % 2 === 1 ? reply(res, 503, status(503, 'ServiceUnavailable')) : reply(res, 200, POD)));
    const { client } = clientOf(f.url);
    await client.core.readNamespacedPod({ namespace: 'ns', name: 'p' });
    expect(f.requests).toHaveLength(2);
    await client.core.createNamespacedPod({ namespace: 'ns', body: { metadata: { name: 'p' } } }, client.idempotent);
    expect(f.requests).toHaveLength(4);
    const err = await client.core.createNamespacedPod({ namespace: 'ns', body: { metadata: { name: 'p' } } }).catch((e: unknown) => e);
    expect(f.requests).toHaveLength(5);
    expect(fromKubeError(client, err, 'create pod p').message).toBe('kubernetes: could not create pod p: the API server answered 503: ServiceUnavailable (test)');
  });

  it('retries are bounded, with growing jittered delays', async () => {
    const f = await fakeApiServer((_req, res) => reply(res, 500, status(500, 'InternalError')));
    const { client, slept } = clientOf(f.url);
    await expect(client.core.readNamespacedPod({ namespace: 'ns', name: 'p' })).rejects.toMatchObject({ code: 500 });
    expect(f.requests).toHaveLength(DEFAULT_RETRY_POLICY.maxAttempts);
    expect(slept).toEqual([150, 300, 600, 1200, 2400, 4800, 6000, 6000, 6000]);
  });

  it('a request that gets no answer is bounded by the request timeout and fails naming it', async () => {
    const f = await fakeApiServer(() => undefined);
    const { client } = clientOf(f.url, { requestTimeoutMs: 200 });
    const err = await client.core.readNamespacedPod({ namespace: 'ns', name: 'p' }).catch((e: unknown) => e);
    expect(fromKubeError(client, err, 'read pod p').message).toMatch(/^kubernetes: could not read pod p: the API server at http:\/\/127\.0\.0\.1:\d+ did not answer \(no answer within 200 ms\)/);
    expect(f.requests).toHaveLength(DEFAULT_RETRY_POLICY.maxAttemptsWithoutAnswer);
  });

  it('a plain create that got no answer is not sent again', async () => {
    const f = await fakeApiServer(() => undefined);
    const { client } = clientOf(f.url, { requestTimeoutMs: 200 });
    await expect(client.core.createNamespacedPod({ namespace: 'ns', body: { metadata: { name: 'p' } } })).rejects.toThrow(/no answer within 200 ms/);
    expect(f.requests).toHaveLength(1);
  });
});

describe('kubernetes retry policy', () => {
  const p = DEFAULT_RETRY_POLICY;

  it('429 always; 5xx and lost answers only where a second send is harmless; bounded', () => {
    expect(shouldRetry(p, 'POST', false, { kind: 'answer', status: 429 }, 1)).toBe(true);
    expect(shouldRetry(p, 'POST', false, { kind: 'answer', status: 503 }, 1)).toBe(false);
    expect(shouldRetry(p, 'POST', true, { kind: 'answer', status: 503 }, 1)).toBe(true);
    expect(shouldRetry(p, 'DELETE', false, { kind: 'answer', status: 502 }, 1)).toBe(true);
    expect(shouldRetry(p, 'GET', false, { kind: 'answer', status: 501 }, 1)).toBe(false);
    expect(shouldRetry(p, 'GET', false, { kind: 'answer', status: 404 }, 1)).toBe(false);
    expect(shouldRetry(p, 'GET', false, { kind: 'answer', status: 429 }, p.maxAttempts)).toBe(false);
    expect(shouldRetry(p, 'POST', false, { kind: 'no-answer', reached: true }, 1)).toBe(false);
    expect(shouldRetry(p, 'POST', false, { kind: 'no-answer', reached: false }, 1)).toBe(true);
    expect(shouldRetry(p, 'GET', false, { kind: 'no-answer', reached: true }, p.maxAttemptsWithoutAnswer)).toBe(false);
  });

  it('Retry-After is a floor (capped), read as seconds or a date; the backoff is jittered within [half, whole]', () => {
    expect(retryAfterMs('3', 0)).toBe(3000);
    expect(retryAfterMs(new Date(10_000).toUTCString(), 4_000)).toBe(6000);
    expect(retryAfterMs('soon', 0)).toBeUndefined();
    expect(retryDelayMs(p, 1, 1000, 0)).toBe(1000);
    expect(retryDelayMs(p, 1, 1000, 0.99)).toBe(1000 + Math.floor(0.99 * p.baseDelayMs));
    expect(retryDelayMs(p, 1, 3_600_000, 0)).toBe(p.maxRetryAfterMs);
    expect(retryDelayMs(p, 3, undefined, 0)).toBe(p.baseDelayMs * 2);
    expect(retryDelayMs(p, 3, undefined, 0.999)).toBeLessThan(p.baseDelayMs * 4);
    expect(retryDelayMs(p, 30, undefined, 0.999)).toBeLessThan(p.maxDelayMs);
  });
});
