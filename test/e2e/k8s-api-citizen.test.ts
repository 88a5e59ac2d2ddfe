import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { afterEach, expect, it } from 'vitest';
import { ensurePodSandbox, type EnsurePodInput } from '../../src/backends/kubernetes/pod-sandboxes.js';
import { createEphemeralPod, deletePod, waitForRunning } from '../../src/backends/kubernetes/pods.js';
import { sandboxDataClaim, sandboxPod } from '../../src/backends/kubernetes/manifests.js';
import { Broker } from '../../src/broker/broker.js';
import { BerthError } from '../../src/errors.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BerthOnStandin } from '../k8s-standin/berth-on-standin.js';
import { describeStandin, ensureStandinImage } from '../k8s-standin/describe-standin.js';
import { sandboxInput, standinClient } from '../k8s-standin/fixtures.js';
import { StandinApiServer, type StandinOptions } from '../k8s-standin/server.js';

/*
 * berth as a good citizen of the API server, through the stand-in: sessions open under the
 * server's flow control (429 + Retry-After), waits watch instead of polling (and list again on
 * 410 Gone), and an image that fails to pull is waited for within its bound. The stand-in's own
 * watch strictness is checked on the wire.
 */

describeStandin('kubernetes API use (stand-in API server)', () => {
  const stops: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const stop of stops.splice(0)) await stop();
  }, 120_000);

  const standin = async (opts: StandinOptions): Promise<StandinApiServer> => {
    await ensureStandinImage();
    const server = await StandinApiServer.start(opts);
    stops.push(() => server.stop());
    return server;
  };

  it('sessions opened at once all succeed under the API server\'s flow control (429 + Retry-After)', async () => {
    await ensureStandinImage();
    const cluster = await BerthOnStandin.start({ flowControl: { requestsPerSecond: 4, burst: 4 } });
    stops.push(() => cluster.stop());
    const broker = await Broker.open({
      config: parseConfig({ backend: 'kubernetes', persistent: false, kubernetes: cluster.section() }),
      berthHome: cluster.newHome(), env: { PATH: process.env['PATH'] },
    });
    stops.unshift(() => broker.close({ graceMs: 2_000 }));
    const results = await Promise.all([0, 1, 2, 3].map((i) => broker.exec({ session: `s${i}` }, `echo hello-${i}`)));
    expect(results.map((r) => [r.exitCode, r.stdout.trim()])).toEqual([0, 1, 2, 3].map((i) => [0, `hello-${i}`]));
    // The budget was really met: some requests were turned away and sent again.
    expect(cluster.server.requests.rejected).toBeGreaterThan(0);
  });

  it('waiting for a pod is one watch, not a poll: no GET however long it takes', async () => {
    // The first pull fails and the kubelet retries after 1.5 s: a 250 ms poll would have read the pod about six times.
    const image = 'registry.test/flaky:1';
    const server = await standin({ imagePulls: { fails: (img, attempt) => (img === image && attempt === 1 ? 'connection reset by peer (test)' : undefined), backoffMs: 1500 } });
    const client = standinClient(server);
    const input = sandboxInput(`inst-${randomBytes(4).toString('hex')}`, { k: { image } });
    const created = await createEphemeralPod(client, sandboxPod(input));
    const before = { ...server.requests.byVerb };
    const pod = await waitForRunning(client, input.name, 60_000, { known: created });
    expect(pod.status?.phase).toBe('Running');
    const during = (verb: string): number => (server.requests.byVerb[verb] ?? 0) - (before[verb] ?? 0);
    expect({ get: during('get'), list: during('list'), watch: during('watch') }).toEqual({ get: 0, list: 0, watch: 1 });
    await deletePod(client, input.name);
  });

  it('a watch whose resourceVersion was compacted away (410 Gone) lists again and goes on', async () => {
    const server = await standin({});
    const client = standinClient(server);
    const input = sandboxInput(`inst-${randomBytes(4).toString('hex')}`);
    const created = await createEphemeralPod(client, sandboxPod(input));
    // Something else changes after the pod's resourceVersion, and the history is compacted past it.
    await client.core.createNamespacedPersistentVolumeClaim({ namespace: 'berth', body: sandboxDataClaim(sandboxInput('other', { ephemeral: false })) });
    server.compactWatchHistory();
    const before = { ...server.requests.byVerb };
    const pod = await waitForRunning(client, input.name, 60_000, { known: created });
    expect(pod.status?.phase).toBe('Running');
    expect((server.requests.byVerb['list'] ?? 0) - (before['list'] ?? 0)).toBe(1);
    expect((server.requests.byVerb['watch'] ?? 0) - (before['watch'] ?? 0)).toBeGreaterThanOrEqual(2);
    await deletePod(client, input.name);
  });

  it('an image that fails to pull is waited for within imagePullTimeoutSeconds: a passing failure is outlasted, a lasting one fails naming the image and why', async () => {
    const flaky = 'registry.test/flaky:2';
    const missing = 'registry.test/missing:1';
    const server = await standin({
      imagePulls: {
        fails: (img, attempt) => (img === missing ? 'registry.test/missing:1: not found (test)' : img === flaky && attempt === 1 ? 'i/o timeout (test)' : undefined),
        backoffMs: 500,
      },
    });
    const client = standinClient(server);
    const inst = `inst-${randomBytes(4).toString('hex')}`;
    const input = (image: string): EnsurePodInput => ({
      ...sandboxInput(inst, { k: { image, imagePullTimeoutSeconds: 5 } }), knownName: undefined, unique: () => randomBytes(4).toString('hex'),
    });
    const ok = await ensurePodSandbox(client, input(flaky));
    expect(ok.created).toBe(true);
    const err = await ensurePodSandbox(client, input(missing)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as BerthError).code).toBe('image_pull_failed');
    expect((err as Error).message).toMatch(
      /^kubernetes: pod \S+ cannot run: image "registry\.test\/missing:1" could not be pulled for 5 s \((ErrImagePull|ImagePullBackOff): failed to pull and unpack image "registry\.test\/missing:1": registry\.test\/missing:1: not found \(test\)\); check the image reference .* or raise kubernetes\.imagePullTimeoutSeconds$/,
    );
    await deletePod(client, ok.name);
  });

  it('the stand-in\'s list is one snapshot: a pod whose deletion ends while the list looks at its container is not listed with a version past its deletion (a watch from there would never see it go)', async () => {
    // The engine answers the list's inspect only after the pod's removal ended.
    const real = new Dockerode();
    // eslint-disable-next-line prefer-const -- the engine's proxy needs the server, made with it
    let server: StandinApiServer;
    let slowInspect = false;
    const docker = new Proxy(real, {
      get(target, prop) {
        if (prop === 'getContainer') {
          return (id: string) => new Proxy(target.getContainer(id), {
            get(c, cp) {
              const v = Reflect.get(c, cp) as unknown;
              if (cp === 'inspect' && slowInspect) {
                // Answered only once the pod's deletion has ended (its container removed): the race, made certain.
                return async (...args: unknown[]) => {
                  for (let i = 0; i < 600 && server.terminating.size > 0; i++) await sleep(50);
                  return (v as (...a: unknown[]) => unknown).apply(c, args);
                };
              }
              return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(c) : v;
            },
          });
        }
        const v = Reflect.get(target, prop) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    server = await standin({ docker });
    const client = standinClient(server, 'snap');
    const input = sandboxInput('inst', { k: { namespace: 'snap' } });
    await waitForRunning(client, (await createEphemeralPod(client, sandboxPod(input))).metadata!.name!, 60_000);
    slowInspect = true;
    await deletePod(client, input.name);
    const res = await server.fetch(`/api/v1/namespaces/snap/pods?fieldSelector=metadata.name%3D${input.name}`);
    slowInspect = false;
    const list = (await res.json()) as { metadata: { resourceVersion: string }; items: { metadata: { name: string } }[] };
    // The removal ended during the list's look: the pod is gone by now.
    expect(server.terminating.has(`snap/${input.name}`)).toBe(false);
    const watched = await (await server.fetch(`/api/v1/namespaces/snap/pods?watch=1&fieldSelector=metadata.name%3D${input.name}&resourceVersion=${list.metadata.resourceVersion}&timeoutSeconds=1`)).text();
    const deleted = watched.split('\n').filter((l) => l !== '').some((l) => (JSON.parse(l) as { type: string }).type === 'DELETED');
    // Listed, it must be seen to go from the list's version; not listed, nothing is owed.
    expect({ listed: list.items.length > 0, deletedSeen: deleted }).toEqual({ listed: false, deletedSeen: false });
  });

  it('the stand-in\'s flow control answers on the wire as API Priority and Fairness does: 429 TooManyRequests with Retry-After, per credential, before the request runs', async () => {
    const server = await standin({ flowControl: { requestsPerSecond: 0.5, burst: 2, retryAfterSeconds: 3 } });
    const statuses: number[] = [];
    let refused: Response | undefined;
    for (let i = 0; i < 3; i++) {
      const r = await server.fetch('/api/v1/namespaces/fc/pods');
      statuses.push(r.status);
      if (r.status === 429) refused = r;
    }
    expect(statuses).toEqual([200, 200, 429]);
    expect(refused!.headers.get('retry-after')).toBe('3');
    expect(await refused!.json()).toMatchObject({ kind: 'Status', code: 429, reason: 'TooManyRequests', details: { retryAfterSeconds: 3 } });
    // Another credential has a budget of its own.
    expect((await server.fetch('/api/v1/namespaces/fc/pods', { headers: { authorization: `Bearer ${server.adminToken}` } })).status).toBe(200);
    expect(server.requests.rejected).toBe(1);
  });

  it('the stand-in serves watches as strictly as an API server: 410 Gone past compaction, bookmarks, selectors it indexes only', async () => {
    const server = await standin({ bookmarkIntervalMs: 100 });
    const get = async (query: string): Promise<{ status: number; lines: Record<string, unknown>[] }> => {
      const res = await server.fetch(`/api/v1/namespaces/w/pods?${query}`);
      const text = await res.text();
      return { status: res.status, lines: text.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Record<string, unknown>) };
    };
    const client = standinClient(server, 'w');
    const input = sandboxInput('inst', { k: { namespace: 'w' } });
    await createEphemeralPod(client, sandboxPod(input));
    const listed = await get(`fieldSelector=metadata.name%3D${input.name}`);
    const rv = (listed.lines[0] as { metadata: { resourceVersion: string } }).metadata.resourceVersion;
    const watched = await get(`watch=1&fieldSelector=metadata.name%3D${input.name}&resourceVersion=${rv}&allowWatchBookmarks=true&timeoutSeconds=1`);
    expect(watched.status).toBe(200);
    expect(watched.lines.map((e) => e['type'])).toContain('BOOKMARK');
    expect(watched.lines.filter((e) => e['type'] !== 'BOOKMARK').every((e) => (e['object'] as { metadata: { name: string } }).metadata.name === input.name)).toBe(true);
    await client.core.createNamespacedPersistentVolumeClaim({ namespace: 'w', body: sandboxDataClaim(sandboxInput('other', { ephemeral: false, k: { namespace: 'w' } })) });
    server.compactWatchHistory();
    const gone = await get(`watch=1&resourceVersion=${rv}`);
    expect(gone.lines).toEqual([{ type: 'ERROR', object: expect.objectContaining({ kind: 'Status', code: 410, reason: 'Expired' }) }]);
    expect((await get('watch=1&fieldSelector=spec.bogus%3Dx')).status).toBe(400);
    expect((await get('watch=1&resourceVersion=abc')).status).toBe(400);
    await deletePod(client, input.name);
  });
});
