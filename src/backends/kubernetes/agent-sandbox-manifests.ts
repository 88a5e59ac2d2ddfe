import type { V1ObjectMeta, V1PersistentVolumeClaimSpec, V1PodSpec } from '@kubernetes/client-node';
import { sandboxAnnotations, sandboxLabels } from './labels.js';
import { assertNoHostMount, DATA_VOLUME, sandboxPodLabels, sandboxPodSpec, type SandboxManifestInput } from './manifests.js';

/*
 * Mode `agent-sandbox` (kubernetes-sigs/agent-sandbox v0.5, CRDs vendored in test/schemas/): a
 * `Sandbox` per persistent identity (its controller makes the pod, named after the Sandbox, and
 * the PVC `data-<name>` from the claim template), and a `SandboxClaim` per ephemeral identity when
 * a `SandboxWarmPool` is named (the pool's SandboxTemplate, which the operator owns, shapes those
 * pods; berth adds its labels through `additionalPodMetadata`).
 */

export const AGENT_SANDBOX_API = 'agents.x-k8s.io/v1beta1';
export const AGENT_SANDBOX_EXTENSIONS_API = 'extensions.agents.x-k8s.io/v1beta1';

export interface SandboxResource {
  apiVersion: typeof AGENT_SANDBOX_API;
  kind: 'Sandbox';
  metadata: V1ObjectMeta;
  spec: {
    operatingMode: 'Running';
    /** Retain: berth deletes a Sandbox itself (session close, reapers); nothing expires it behind berth's back. */
    shutdownPolicy: 'Retain';
    podTemplate: { metadata: { labels: Record<string, string>; annotations: Record<string, string> }; spec: V1PodSpec };
    volumeClaimTemplates?: { metadata: { name: string; labels: Record<string, string> }; spec: V1PersistentVolumeClaimSpec }[];
  };
}

export interface SandboxClaimResource {
  apiVersion: typeof AGENT_SANDBOX_EXTENSIONS_API;
  kind: 'SandboxClaim';
  metadata: V1ObjectMeta;
  spec: {
    warmPoolRef: { name: string };
    additionalPodMetadata: { labels: Record<string, string>; annotations: Record<string, string> };
    lifecycle: { shutdownPolicy: 'Delete' };
  };
}

/** The `Sandbox` of one identity: the same pod spec as mode `pods`, persistent files on a claim template. */
export function sandboxResource(input: SandboxManifestInput): SandboxResource {
  const labels = sandboxLabels(input);
  const annotations = sandboxAnnotations(input);
  const k = input.kubernetes;
  const resource: SandboxResource = {
    apiVersion: AGENT_SANDBOX_API,
    kind: 'Sandbox',
    metadata: { name: input.name, namespace: k.namespace, labels, annotations },
    spec: {
      operatingMode: 'Running',
      shutdownPolicy: 'Retain',
      podTemplate: { metadata: { labels: sandboxPodLabels(input), annotations: { ...annotations } }, spec: sandboxPodSpec(input, 'claim-template') },
    },
  };
  if (!input.ephemeral) {
    const claim: V1PersistentVolumeClaimSpec = { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: `${k.storageMb}Mi` } } };
    if (k.storageClassName !== undefined) claim.storageClassName = k.storageClassName;
    resource.spec.volumeClaimTemplates = [{ metadata: { name: DATA_VOLUME, labels: { ...labels } }, spec: claim }];
  }
  return resource;
}

/**
 * A `SandboxClaim` on the profile's warm pool for an ephemeral identity. Deleted with its
 * sandbox when berth deletes the claim (`shutdownPolicy: Delete`).
 */
export function sandboxClaimResource(input: SandboxManifestInput): SandboxClaimResource {
  const k = input.kubernetes;
  if (k.warmPool === undefined) throw new RangeError('a SandboxClaim needs kubernetes.warmPool');
  if (!input.ephemeral) throw new RangeError('only ephemeral sandboxes are claimed from a warm pool; persistent ones are Sandbox resources found again by name');
  assertNoHostMount(input.mount);
  const labels = sandboxLabels(input);
  const annotations = sandboxAnnotations(input);
  return {
    apiVersion: AGENT_SANDBOX_EXTENSIONS_API,
    kind: 'SandboxClaim',
    metadata: { name: input.name, namespace: k.namespace, labels, annotations },
    spec: {
      warmPoolRef: { name: k.warmPool },
      // The pod's labels include its network reach, so the tenant's NetworkPolicy selects it.
      additionalPodMetadata: { labels: sandboxPodLabels(input), annotations: { ...annotations } },
      lifecycle: { shutdownPolicy: 'Delete' },
    },
  };
}
