import { createHash, randomBytes } from 'node:crypto';
import type { ExecTarget } from '../../src/backends/kubernetes/spawn.js';
import { kubeClient, type KubeClient } from '../../src/backends/kubernetes/kube-client.js';
import { CONTAINER_NAME, sandboxPod, type SandboxManifestInput } from '../../src/backends/kubernetes/manifests.js';
import { ephemeralPodName, persistentPodName } from '../../src/backends/kubernetes/names.js';
import { createEphemeralPod, waitForRunning } from '../../src/backends/kubernetes/pods.js';
import { KUBERNETES_DEFAULTS, type KubernetesSettings } from '../../src/backends/kubernetes/settings.js';
import type { StandinApiServer } from './server.js';

/** The backend's clients, pointed at the stand-in through the real KubeConfig loader, with berth's token (what deploy/rbac.yaml grants). */
export function standinClient(server: StandinApiServer, namespace = 'berth'): KubeClient {
  return kubeClient(server.kubeConfig(namespace), namespace);
}

/** The same with the admin token: a test's own hand (fixtures, `kubectl` behind berth's back), which berth's Role does not limit. */
export function standinAdminClient(server: StandinApiServer, namespace = 'berth'): KubeClient {
  return kubeClient(server.kubeConfig(namespace, { admin: true }), namespace);
}

/** A manifest input for a fresh identity of `installation`. */
export function sandboxInput(installation: string, opts: { key?: string; tenant?: string; ephemeral?: boolean; k?: Partial<KubernetesSettings> } = {}): SandboxManifestInput {
  const identity = { installation, tenant: opts.tenant ?? 'local', profile: 'default', key: opts.key ?? `session:${randomBytes(4).toString('hex')}` };
  const digest = createHash('sha256').update(JSON.stringify([identity.installation, identity.tenant, identity.profile, identity.key])).digest('hex');
  const ephemeral = opts.ephemeral ?? true;
  return {
    identity,
    digest,
    ephemeral,
    rule: 'auto:5',
    name: ephemeral ? ephemeralPodName(digest, randomBytes(4).toString('hex')) : persistentPodName(digest),
    mount: null,
    kubernetes: { ...KUBERNETES_DEFAULTS, podStartTimeoutSeconds: 60, ...opts.k },
  };
}

/** Creates an ephemeral sandbox pod and waits until it runs; the exec target of its container. */
export async function runningPod(client: KubeClient, input: SandboxManifestInput): Promise<ExecTarget> {
  await createEphemeralPod(client, sandboxPod(input));
  await waitForRunning(client, input.name, input.kubernetes.podStartTimeoutSeconds * 1000);
  return { client, pod: input.name, container: CONTAINER_NAME };
}
