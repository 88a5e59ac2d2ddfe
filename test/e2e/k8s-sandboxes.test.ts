import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { execOnceInPod } from '../../src/backends/kubernetes/exec-once.js';
import { tenantNetworkPolicy } from '../../src/backends/kubernetes/manifests.js';
import { dataClaimName } from '../../src/backends/kubernetes/names.js';
import { ensurePodSandbox, listManagedPods, removePodSandbox, type EnsurePodInput } from '../../src/backends/kubernetes/pod-sandboxes.js';
import { deletePod, listPods, waitForPodGone } from '../../src/backends/kubernetes/pods.js';
import { UnsupportedError } from '../../src/errors.js';
import { TEST_IMAGE } from '../helpers/docker.js';
import { describeStandin, ensureStandinImage } from '../k8s-standin/describe-standin.js';
import { sandboxInput, standinClient } from '../k8s-standin/fixtures.js';
import { StandinApiServer } from '../k8s-standin/server.js';

/*
 * Sandbox lifecycle as pods (create or adopt, reattach, recreate once, cleanup on failure, list
 * for reapers) through the real client against the stand-in, pods as real containers and
 * claims as real directories.
 */

function ensureInput(installation: string, opts: { ephemeral: boolean; knownName?: string; key?: string; image?: string; mount?: string | null }): EnsurePodInput {
  const base = sandboxInput(installation, { ephemeral: opts.ephemeral, key: opts.key ?? 'default', k: opts.image === undefined ? {} : { image: opts.image } });
  return { ...base, mount: opts.mount ?? null, knownName: opts.knownName, unique: () => randomBytes(4).toString('hex') };
}

describeStandin('kubernetes sandboxes as pods (stand-in API server, real client)', () => {
  let server: StandinApiServer;

  beforeAll(async () => {
    await ensureStandinImage();
    server = await StandinApiServer.start({ imageFor: (image) => (image === 'missing:image' ? 'berth-no-such-image:none' : TEST_IMAGE) });
  });
  afterAll(async () => {
    await server?.stop();
  });

  const installation = (): string => `inst-${randomBytes(4).toString('hex')}`;

  it('persistent: created once, adopted after, recreated once when deleted out of band, its files kept on the claim', async () => {
    const client = standinClient(server);
    const inst = installation();
    const first = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: false }));
    expect(first).toMatchObject({ created: true, recreated: false });
    const write = await execOnceInPod(first.target, ['/bin/sh', '-c', 'echo kept > /workspace/f && echo home > "$HOME/g" && id -u']);
    expect(write.exitCode).toBe(0);
    const again = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: false, knownName: first.name }));
    expect(again).toMatchObject({ name: first.name, created: false, recreated: false });

    await deletePod(client, first.name);
    await waitForPodGone(client, first.name, 30_000, 50);
    const back = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: false, knownName: first.name }));
    expect(back).toMatchObject({ name: first.name, created: true, recreated: true });
    const read = await execOnceInPod(back.target, ['/bin/sh', '-c', 'cat /workspace/f "$HOME/g"']);
    expect(read.stdout.toString()).toBe('kept\nhome\n');

    // A pod whose container ended never runs again (restartPolicy Never): replaced, files kept.
    await server.killPodContainer('berth', first.name);
    const replaced = await ensurePodSandbox(client, ensureInput(inst, { ephemeral: false, knownName: first.name }));
    expect(replaced).toMatchObject({ created: true, recreated: true });
    expect((await execOnceInPod(replaced.target, ['cat', '/workspace/f'])).stdout.toString()).toBe('kept\n');
    await removePodSandbox(client, first.name, { withFiles: true });
    await expect(client.core.readNamespacedPersistentVolumeClaim({ namespace: 'berth', name: dataClaimName(first.name) })).rejects.toMatchObject({ code: 404 });
  });

  it('ephemeral: reattached only by its recorded name; gone, it is replaced by a new name once', async () => {
    const client = standinClient(server);
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
    const client = standinClient(server);
    const theirs = await ensurePodSandbox(client, ensureInput(installation(), { ephemeral: true, key: 'session:x' }));
    const mine = await ensurePodSandbox(client, ensureInput(installation(), { ephemeral: true, key: 'session:x', knownName: theirs.name }));
    expect(mine.name).not.toBe(theirs.name);
    for (const n of [theirs.name, mine.name]) await removePodSandbox(client, n, { withFiles: false });
  });

  it('a failed create removes what it made and reports the original error', async () => {
    const client = standinClient(server);
    const inst = installation();
    await expect(ensurePodSandbox(client, ensureInput(inst, { ephemeral: false, image: 'missing:image' }))).rejects.toThrow(/cannot run: phase Pending, container waiting: CreateContainerError/);
    for (let i = 0; i < 100 && (await listPods(client, `berth.installation=${inst}`)).length > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(await listPods(client, `berth.installation=${inst}`)).toEqual([]);
    const claims = await client.core.listNamespacedPersistentVolumeClaim({ namespace: 'berth', labelSelector: `berth.installation=${inst}` });
    expect(claims.items).toEqual([]);
  });

  it('the tenant NetworkPolicy exists before the tenant\'s first pod', async () => {
    const client = standinClient(server);
    const inst = installation();
    const input = ensureInput(inst, { ephemeral: true });
    const made = await ensurePodSandbox(client, input);
    const np = await client.networking.readNamespacedNetworkPolicy({ namespace: 'berth', name: tenantNetworkPolicy(inst, input.identity.tenant, input.kubernetes).metadata!.name! });
    const pod = await client.core.readNamespacedPod({ namespace: 'berth', name: made.name });
    expect(Number(np.metadata!.resourceVersion)).toBeLessThan(Number(pod.metadata!.resourceVersion));
    await removePodSandbox(client, made.name, { withFiles: false });
  });

  it('a host mount is refused before anything is created', async () => {
    const client = standinClient(server);
    const inst = installation();
    await expect(ensurePodSandbox(client, ensureInput(inst, { ephemeral: true, mount: '/home/ana/project' }))).rejects.toThrow(UnsupportedError);
    expect(await listPods(client, `berth.installation=${inst}`)).toEqual([]);
  });

  it('reapers list this installation\'s sandboxes only, with lifecycle and state', async () => {
    const client = standinClient(server);
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
