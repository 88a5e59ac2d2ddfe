import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { identitySelector, installationSelector, LABEL } from '../../src/backends/kubernetes/labels.js';
import { sandboxDataClaim, sandboxPod, tenantNetworkPolicy } from '../../src/backends/kubernetes/manifests.js';
import { kubeClient } from '../../src/backends/kubernetes/kube-client.js';
import { ensureNetworkPolicy } from '../../src/backends/kubernetes/network-policies.js';
import {
  createEphemeralPod,
  createOrAdoptClaim,
  createOrAdoptPod,
  deletePod,
  listPods,
  waitForPodGone,
  waitForRunning,
} from '../../src/backends/kubernetes/pods.js';
import { BackendUnavailableError, TimeoutError } from '../../src/errors.js';
import { TEST_IMAGE } from '../helpers/docker.js';
import { describeStandin, ensureStandinImage } from '../k8s-standin/describe-standin.js';
import { sandboxInput, standinClient } from '../k8s-standin/fixtures.js';
import { StandinApiServer } from '../k8s-standin/server.js';

/*
 * Pod lifecycle through the real @kubernetes/client-node against the stand-in API server, each
 * pod a real container. Each test uses its own installation id, so label selections see only
 * what it made.
 */

describeStandin('kubernetes pod lifecycle (stand-in API server, real client)', () => {
  let server: StandinApiServer;

  beforeAll(async () => {
    await ensureStandinImage();
    // `missing:image` stands for an image the registry does not have.
    server = await StandinApiServer.start({ imageFor: (image) => (image === 'missing:image' ? 'berth-no-such-image:none' : TEST_IMAGE) });
  });
  afterAll(async () => {
    await server?.stop();
  });

  const installation = (): string => `inst-${randomBytes(4).toString('hex')}`;

  it('creates pods, lists them by label selector (installation, identity) and deletes them idempotently', async () => {
    const client = standinClient(server);
    const inst = installation();
    const a = sandboxInput(inst, { ephemeral: true });
    const b = sandboxInput(inst, { ephemeral: true, tenant: 'other' });
    const foreign = sandboxInput(installation(), { ephemeral: true });
    for (const i of [a, b, foreign]) await createEphemeralPod(client, sandboxPod(i));
    const mine = await listPods(client, installationSelector(inst));
    expect(mine.map((p) => p.metadata!.name).sort()).toEqual([a.name, b.name].sort());
    expect((await listPods(client, identitySelector(inst, a.digest))).map((p) => p.metadata!.name)).toEqual([a.name]);
    expect((await listPods(client, `${installationSelector(inst)},${LABEL.lifecycle}=persistent`))).toEqual([]);
    expect(await deletePod(client, a.name)).toBe(true);
    await waitForPodGone(client, a.name, 30_000);
    expect(await deletePod(client, a.name)).toBe(false);
    expect((await listPods(client, installationSelector(inst))).map((p) => p.metadata!.name)).toEqual([b.name]);
    await deletePod(client, b.name);
    await deletePod(client, foreign.name);
  });

  it('waits for Running, and the pod really runs as the manifest says (non-root, caps dropped)', async () => {
    const client = standinClient(server);
    const i = sandboxInput(installation(), { k: { runAsUser: 4321, runAsGroup: 4321, fsGroup: 4321 } });
    await createEphemeralPod(client, sandboxPod(i));
    const pod = await waitForRunning(client, i.name, 60_000);
    expect(pod.status!.phase).toBe('Running');
    const id = server.containers.get(`berth/${i.name}`) as string;
    const info = await server.docker.getContainer(id).inspect();
    expect(info.Config.User).toBe('4321:4321');
    expect(info.HostConfig.CapDrop).toEqual(['ALL']);
    expect(info.HostConfig.SecurityOpt).toContain('no-new-privileges:true');
    expect(info.HostConfig.ReadonlyRootfs).toBe(true);
    await deletePod(client, i.name);
  });

  it('a persistent pod is created once and adopted after; a pod of another identity or installation under its name is refused', async () => {
    const client = standinClient(server);
    const inst = installation();
    const i = sandboxInput(inst, { ephemeral: false, key: 'default' });
    const owner = { installation: inst, digest: i.digest };
    const first = await createOrAdoptPod(client, sandboxPod(i), owner, 30_000);
    expect(first.adopted).toBe(false);
    const second = await createOrAdoptPod(client, sandboxPod(i), owner, 30_000);
    expect(second.adopted).toBe(true);
    expect(second.object.metadata!.uid).toBe(first.object.metadata!.uid);
    // Another installation whose identity happens to map to the same name never takes the pod over.
    await expect(createOrAdoptPod(client, sandboxPod(i), { installation: installation(), digest: i.digest }, 30_000)).rejects.toMatchObject({ code: 'policy_refused', message: expect.stringMatching(/belongs to installation/) });
    await expect(createOrAdoptPod(client, sandboxPod(i), { installation: inst, digest: 'f'.repeat(64) }, 30_000)).rejects.toMatchObject({ code: 'policy_refused', message: expect.stringMatching(/another sandbox identity/) });
    await deletePod(client, i.name);
  });

  it('two processes racing to create a persistent pod end with one pod, adopted by the loser', async () => {
    const client = standinClient(server);
    const other = kubeClient(server.kubeConfig('berth'), 'berth');
    const inst = installation();
    const i = sandboxInput(inst, { ephemeral: false, key: 'default' });
    const owner = { installation: inst, digest: i.digest };
    const results = await Promise.all([createOrAdoptPod(client, sandboxPod(i), owner, 30_000), createOrAdoptPod(other, sandboxPod(i), owner, 30_000)]);
    expect(results.map((r) => r.adopted).sort()).toEqual([false, true]);
    expect(results[0].object.metadata!.uid).toBe(results[1].object.metadata!.uid);
    expect(await listPods(client, installationSelector(inst))).toHaveLength(1);
    await deletePod(client, i.name);
  });

  it('a persistent pod deleted while terminating is waited out and created anew', async () => {
    const client = standinClient(server);
    const inst = installation();
    const i = sandboxInput(inst, { ephemeral: false, key: 'default' });
    const owner = { installation: inst, digest: i.digest };
    const first = await createOrAdoptPod(client, sandboxPod(i), owner, 30_000);
    await deletePod(client, i.name);
    const again = await createOrAdoptPod(client, sandboxPod(i), owner, 30_000);
    expect(again.adopted).toBe(false);
    expect(again.object.metadata!.uid).not.toBe(first.object.metadata!.uid);
    await deletePod(client, i.name);
  });

  it('an ephemeral pod is never adopted: a taken name is an error', async () => {
    const client = standinClient(server);
    const i = sandboxInput(installation(), { ephemeral: true });
    await createEphemeralPod(client, sandboxPod(i));
    await expect(createEphemeralPod(client, sandboxPod(i))).rejects.toThrow(/never adopted/);
    await deletePod(client, i.name);
  });

  it('a pod that cannot start fails the wait at once, saying why; a pending one times out with where it stands', async () => {
    const client = standinClient(server);
    const i = sandboxInput(installation(), { k: { image: 'missing:image' } });
    await createEphemeralPod(client, sandboxPod(i));
    const err = await waitForRunning(client, i.name, 60_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendUnavailableError);
    expect((err as Error).message).toMatch(/cannot run: phase Pending, container waiting: CreateContainerError/);
    await deletePod(client, i.name);
    const j = sandboxInput(installation());
    await createEphemeralPod(client, sandboxPod(j));
    const timedOut = await waitForRunning(client, j.name, 1).catch((e: unknown) => e);
    expect(timedOut).toBeInstanceOf(TimeoutError);
    expect((timedOut as Error).message).toMatch(/was not running within .* raise kubernetes\.podStartTimeoutSeconds/);
    await deletePod(client, j.name);
  });

  it('a pod whose container died shows Failed and the wait says so', async () => {
    const client = standinClient(server);
    const i = sandboxInput(installation());
    await createEphemeralPod(client, sandboxPod(i));
    await waitForRunning(client, i.name, 60_000);
    await server.killPodContainer('berth', i.name);
    await expect(waitForRunning(client, i.name, 10_000)).rejects.toThrow(/cannot run: phase Failed, container ended with exit code/);
    await deletePod(client, i.name);
  });

  it('claims: created once, adopted after, refused when another identity\'s', async () => {
    const client = standinClient(server);
    const inst = installation();
    const i = sandboxInput(inst, { ephemeral: false, key: 'default' });
    const owner = { installation: inst, digest: i.digest };
    expect((await createOrAdoptClaim(client, sandboxDataClaim(i), owner)).adopted).toBe(false);
    expect((await createOrAdoptClaim(client, sandboxDataClaim(i), owner)).adopted).toBe(true);
    await expect(createOrAdoptClaim(client, sandboxDataClaim(i), { installation: inst, digest: '0'.repeat(64) })).rejects.toMatchObject({ code: 'policy_refused', message: expect.stringMatching(/another sandbox identity/) });
  });

  it('the tenant NetworkPolicy is created once; a second ensure is a no-op', async () => {
    const client = standinClient(server);
    const inst = installation();
    const np = tenantNetworkPolicy(inst, 'acme', sandboxInput(inst).kubernetes);
    await ensureNetworkPolicy(client, np);
    await ensureNetworkPolicy(client, np);
    const read = await client.networking.readNamespacedNetworkPolicy({ namespace: 'berth', name: np.metadata!.name! });
    // Stored as a real API server keeps it: the empty ingress list comes back absent (omitempty).
    expect(read.spec!.ingress).toBeUndefined();
    expect(read.spec!.policyTypes).toEqual(['Ingress', 'Egress']);
  });

  it('API refusals become errors that name the cause and the fix', async () => {
    const bad = standinClient(server);
    const wrongToken = { ...bad, core: kubeClient((() => {
      const kc = server.kubeConfig();
      kc.users[0] = { ...kc.users[0]!, token: 'wrong' };
      return kc;
    })(), 'berth').core };
    await expect(listPods(wrongToken, installationSelector('x'))).rejects.toThrow(/refused berth's credentials \(401\)/);
    // A pod that breaks Pod Security "restricted" is refused by the namespace's admission.
    const i = sandboxInput(installation());
    const pod = sandboxPod(i);
    pod.spec!.containers[0]!.securityContext!.allowPrivilegeEscalation = true;
    await expect(createEphemeralPod(bad, pod)).rejects.toThrow(/403 Forbidden.*PodSecurity "restricted:latest".*apply deploy\/rbac\.yaml/);
    const unreachable = kubeClient((() => {
      const kc = server.kubeConfig();
      kc.clusters[0] = { ...kc.clusters[0]!, server: 'http://127.0.0.1:9' };
      return kc;
    })(), 'berth');
    await expect(listPods(unreachable, installationSelector('x'))).rejects.toThrow(/did not answer/);
  });
});
