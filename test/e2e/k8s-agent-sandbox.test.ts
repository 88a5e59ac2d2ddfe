import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { sandboxResource } from '../../src/backends/kubernetes/agent-sandbox-manifests.js';
import { createOrAdoptSandbox, deleteSandbox, ensureAgentSandbox } from '../../src/backends/kubernetes/agent-sandboxes.js';
import { execOnceInPod } from '../../src/backends/kubernetes/exec-once.js';
import { persistentPodName } from '../../src/backends/kubernetes/names.js';
import { waitForPodGone } from '../../src/backends/kubernetes/pods.js';
import { describeStandin, ensureStandinImage } from '../k8s-standin/describe-standin.js';
import { sandboxInput, standinClient } from '../k8s-standin/fixtures.js';
import { StandinApiServer } from '../k8s-standin/server.js';

/*
 * Mode agent-sandbox through the real client's CustomObjectsApi against the stand-in, whose
 * sketch of the Sandbox controller makes the pod and the claim (sandbox-controller.ts).
 */

describeStandin('kubernetes agent-sandbox Sandbox resources (stand-in API server, real client)', () => {
  let server: StandinApiServer;

  beforeAll(async () => {
    await ensureStandinImage();
    server = await StandinApiServer.start();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('a Sandbox is created once and adopted after; its pod runs commands and its files live on the claim template\'s PVC', async () => {
    const client = standinClient(server);
    const inst = `inst-${randomBytes(4).toString('hex')}`;
    const input = { ...sandboxInput(inst, { ephemeral: false, key: 'default' }), mount: null };
    const first = await ensureAgentSandbox(client, input);
    expect(first.created).toBe(true);
    expect(first.name).toBe(persistentPodName(input.digest));
    const r = await execOnceInPod(first.target, ['/bin/sh', '-c', 'echo kept > /workspace/f && id -u']);
    expect(r.stdout.toString()).toBe('1000\n');
    const claim = await client.core.readNamespacedPersistentVolumeClaim({ namespace: 'berth', name: `data-${first.name}` });
    expect(claim.metadata!.ownerReferences![0]).toMatchObject({ kind: 'Sandbox', name: first.name, controller: true });
    const again = await ensureAgentSandbox(client, input);
    expect(again.created).toBe(false);
    expect((await execOnceInPod(again.target, ['cat', '/workspace/f'])).stdout.toString()).toBe('kept\n');
    // Another installation never adopts it.
    await expect(createOrAdoptSandbox(client, sandboxResource({ ...input, ephemeral: false, name: first.name }), { installation: 'someone-else', digest: input.digest }))
      .rejects.toMatchObject({ code: 'policy_refused', message: expect.stringMatching(/belongs to installation/) });
    expect(await deleteSandbox(client, first.name)).toBe(true);
    await waitForPodGone(client, first.name, 30_000);
    await expect(client.core.readNamespacedPersistentVolumeClaim({ namespace: 'berth', name: `data-${first.name}` })).rejects.toMatchObject({ code: 404 });
    expect(await deleteSandbox(client, first.name)).toBe(false);
  });

  it('an adopted Sandbox whose pod ended gets a new pod from its controller; the wait for the old one to go is a watch, not a poll', async () => {
    const client = standinClient(server);
    const inst = `inst-${randomBytes(4).toString('hex')}`;
    const input = { ...sandboxInput(inst, { ephemeral: false, key: 'default' }), mount: null };
    const first = await ensureAgentSandbox(client, input);
    const old = await client.core.readNamespacedPod({ namespace: 'berth', name: first.name });
    await server.killPodContainer('berth', first.name);
    const before = { ...server.requests.byVerb };
    const again = await ensureAgentSandbox(client, input);
    // Three reads (the tenant's NetworkPolicy, the Sandbox after its create's 409, its pod); the ended pod's going is watched, never read again.
    expect((server.requests.byVerb['get'] ?? 0) - (before['get'] ?? 0)).toBe(3);
    expect([again.created, again.replaced]).toEqual([false, true]);
    expect((await client.core.readNamespacedPod({ namespace: 'berth', name: first.name })).metadata!.uid).not.toBe(old.metadata!.uid);
    expect(await deleteSandbox(client, first.name)).toBe(true);
    await waitForPodGone(client, first.name, 30_000);
  });
});
