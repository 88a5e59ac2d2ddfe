import { randomBytes } from 'node:crypto';
import { expect, it } from 'vitest';
import { execOnceInPod } from '../../src/backends/kubernetes/exec-once.js';
import { tenantNetworkPolicy } from '../../src/backends/kubernetes/manifests.js';
import { dataClaimName } from '../../src/backends/kubernetes/names.js';
import { ensurePodSandbox, listManagedPods, removePodSandbox, type EnsurePodInput } from '../../src/backends/kubernetes/pod-sandboxes.js';
import { deletePod, listPods, waitForPodGone } from '../../src/backends/kubernetes/pods.js';
import { UnsupportedError } from '../../src/errors.js';
import { describeClusters, type ClusterUnderTest } from '../k8s-standin/clusters.js';
import { sandboxInput } from '../k8s-standin/fixtures.js';

/*
 * Sandbox lifecycle as pods (create or adopt, reattach, recreate once, cleanup on failure, list
 * for reapers) through the real client: against the stand-in (pods as real containers, claims
 * as real directories), and against a real cluster with BERTH_KUBECONFIG (clusters.ts).
 */

describeClusters('kubernetes sandboxes as pods', (cluster: () => ClusterUnderTest) => {
  const installation = (): string => `inst-${randomBytes(4).toString('hex')}`;
  const ns = (): string => cluster().client.namespace;

  function ensureInput(inst: string, opts: { ephemeral: boolean; knownName?: string; key?: string; image?: string; mount?: string | null }): EnsurePodInput {
    const k = { image: opts.image ?? cluster().image, namespace: ns() };
    const base = sandboxInput(inst, { ephemeral: opts.ephemeral, key: opts.key ?? 'default', k });
    return { ...base, mount: opts.mount ?? null, knownName: opts.knownName, unique: () => randomBytes(4).toString('hex') };
  }

  it('persistent: created once, adopted after, recreated once when deleted out of band, its files kept on the claim', async () => {
    const { client } = cluster();
    const inst = installation();
    const first = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: false }));
    expect(first).toMatchObject({ created: true, recreated: false });
    const write = await execOnceInPod(first.target, ['/bin/sh', '-c', 'echo kept > /workspace/f && echo home > "$HOME/g" && id -u']);
    expect(write.exitCode).toBe(0);
    const again = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: false, knownName: first.name }));
    expect(again).toMatchObject({ name: first.name, created: false, recreated: false });

    await deletePod(client, first.name);
    await waitForPodGone(client, first.name, 30_000);
    const back = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: false, knownName: first.name }));
    expect(back).toMatchObject({ name: first.name, created: true, recreated: true });
    const read = await execOnceInPod(back.target, ['/bin/sh', '-c', 'cat /workspace/f "$HOME/g"']);
    expect(read.stdout.toString()).toBe('kept\nhome\n');

    await removePodSandbox(client, first.name, { withFiles: true });
    await expect(client.core.readNamespacedPersistentVolumeClaim({ namespace: ns(), name: dataClaimName(first.name) })).rejects.toMatchObject({ code: 404 });
  });

  it('persistent: a pod whose container ended (restartPolicy Never) is replaced once, its files kept (stand-in: needs its hook to end a container)', async (ctx) => {
    const standin = cluster().standin;
    if (standin === undefined) return ctx.skip();
    const { client } = cluster();
    const inst = installation();
    const first = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: false }));
    await execOnceInPod(first.target, ['/bin/sh', '-c', 'echo kept > /workspace/f']);
    await standin.killPodContainer(ns(), first.name);
    const replaced = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: false, knownName: first.name }));
    expect(replaced).toMatchObject({ created: true, recreated: true });
    expect((await execOnceInPod(replaced.target, ['cat', '/workspace/f'])).stdout.toString()).toBe('kept\n');
    await removePodSandbox(client, first.name, { withFiles: true });
  });

  it('ephemeral: reattached only by its recorded name; gone, it is replaced by a new name once', async () => {
    const { client } = cluster();
    const inst = installation();
    const first = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: true, key: 'session:s1' }));
    expect(first.created).toBe(true);
    const reattached = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: true, key: 'session:s1', knownName: first.name }));
    expect(reattached).toMatchObject({ name: first.name, created: false, recreated: false });
    // Without the record, the same identity gets a new pod: ephemeral pods are never found by identity.
    const unrecorded = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: true, key: 'session:s1' }));
    expect(unrecorded.name).not.toBe(first.name);
    await deletePod(client, first.name);
    const replaced = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: true, key: 'session:s1', knownName: first.name }));
    expect(replaced.name).not.toBe(first.name);
    expect(replaced).toMatchObject({ created: true, recreated: true });
    for (const n of [unrecorded.name, replaced.name]) await removePodSandbox(client, n, { withFiles: false });
  });

  it('another installation\'s recorded pod name is never reattached', async () => {
    const { client } = cluster();
    const theirs = await ensurePodSandbox(client, ensureInput(installation(), { ephemeral: true, key: 'session:x' }));
    const mine = await ensurePodSandbox(client, ensureInput(installation(), { ephemeral: true, key: 'session:x', knownName: theirs.name }));
    expect(mine.name).not.toBe(theirs.name);
    for (const n of [theirs.name, mine.name]) await removePodSandbox(client, n, { withFiles: false });
  });

  it('a failed create removes what it made and reports the original error', async () => {
    const { client } = cluster();
    const inst = installation();
    const missing = ensureInput(inst, { ephemeral: false, image: cluster().missingImage });
    const failing = { ...missing, kubernetes: { ...missing.kubernetes, imagePullTimeoutSeconds: 2 } };
    await expect(ensurePodSandbox(client, failing)).rejects.toThrow(/cannot run: (phase Pending, container waiting: (CreateContainerError|InvalidImageName)|image "[^"]+" could not be pulled for 2 s)/);
    for (let i = 0; i < 100 && (await listPods(client, `berth.installation=${inst}`)).length > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(await listPods(client, `berth.installation=${inst}`)).toEqual([]);
    const claims = await client.core.listNamespacedPersistentVolumeClaim({ namespace: ns(), labelSelector: `berth.installation=${inst}` });
    expect(claims.items).toEqual([]);
  });

  it('the tenant NetworkPolicy exists before the tenant\'s first pod', async () => {
    const { client } = cluster();
    const inst = installation();
    const input = ensureInput(inst, { ephemeral: true });
    const made = await ensurePodSandbox(client, input);
    const np = await client.networking.readNamespacedNetworkPolicy({ namespace: ns(), name: tenantNetworkPolicy(inst, input.identity.tenant, input.kubernetes).metadata!.name! });
    const pod = await client.core.readNamespacedPod({ namespace: ns(), name: made.name });
    expect(Number(np.metadata!.resourceVersion)).toBeLessThan(Number(pod.metadata!.resourceVersion));
    await removePodSandbox(client, made.name, { withFiles: false });
  });

  it('a host mount is refused before anything is created', async () => {
    const { client } = cluster();
    const inst = installation();
    await expect(ensurePodSandbox(client, ensureInput(inst, { ephemeral: true, mount: '/home/ana/project' }))).rejects.toThrow(UnsupportedError);
    expect(await listPods(client, `berth.installation=${inst}`)).toEqual([]);
  });

  it('reapers list this installation\'s sandboxes only, with lifecycle and state', async () => {
    const { client } = cluster();
    const inst = installation();
    const p = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: false }));
    const e = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: true, key: 'session:r' }));
    const other = await ensurePodSandbox(client, ensureInput(installation(), { ephemeral: true }));
    const listed = await listManagedPods(client, inst);
    expect(listed.map((x) => x.name).sort()).toEqual([p.name, e.name].sort());
    expect(listed.find((x) => x.name === e.name)).toMatchObject({ ephemeral: true, running: true });
    expect(listed.find((x) => x.name === p.name)!.digest).toMatch(/^[0-9a-f]{64}$/);
    for (const n of [p.name, e.name, other.name]) await removePodSandbox(client, n, { withFiles: true });
  });
});
