import { createHash } from 'node:crypto';
import type { V1ConfigMap, V1NetworkPolicy, V1NetworkPolicyEgressRule, V1Pod } from '@kubernetes/client-node';
import type { ProxyAddress } from '../../egress/proxy-address.js';
import { EGRESS_CA_BUNDLE, EGRESS_CA_CERT, EGRESS_CA_DIR } from '../backend.js';
import { apiStatusOf, fromKubeError, type KubeClient } from './kube-client.js';
import { LABEL, labelValue, NETWORK_LABEL, tenantMatchLabels } from './labels.js';
import { NAMESPACE_NAME_LABEL } from './manifests.js';
import { tenantPolicyName } from './names.js';
import type { KubernetesSettings } from './settings.js';

/*
 * A pod in egress mode allowlist (docs/design.md, "Egress"): berth cannot enter its network
 * namespace on a cluster node, so its tenant's NetworkPolicy for this reach admits one thing, TCP
 * to the address of the proxy's shared listener (no DNS, no other address, no ingress), and the
 * pod names itself to the proxy by its credential. berth's CA reaches the pod read-only through a
 * ConfigMap mounted at EGRESS_CA_DIR, one per pod, made right after the pod with the pod as its
 * owner: the cluster's garbage collector deletes it with the pod, whoever deletes the pod (the
 * kubelet waits for a configMap volume's map before it starts the container).
 */

/** What a pod served by the proxy gets: where the proxy is, and the CA files (PEM). */
export interface PodProxyEgress {
  proxy: ProxyAddress;
  ca: { bundlePem: string; caPem: string };
}

const CA_VOLUME = 'berth-egress-ca';

/**
 * The pod's network reach label: `proxy-` and a digest of the proxy address (and of berth's pods,
 * when the policy names them), so a new address gets a new policy (berth creates policies, never
 * updates them) and pods made for the old one keep theirs.
 */
export function proxyReach(proxy: ProxyAddress, pods?: KubernetesSettings['proxyPods']): string {
  const what = pods === undefined
    ? proxy.authority
    : `${proxy.authority} ${JSON.stringify([pods.namespace, Object.entries(pods.labels).sort(), pods.port ?? null])}`;
  return `proxy-${createHash('sha256').update(what, 'utf8').digest('hex').slice(0, 12)}`;
}

/**
 * Where an allowlist pod may send: berth's pods (namespace AND labels) on the port they listen on,
 * when `proxyPods` names them (an in-cluster berth behind a Service, whose address no policy sees);
 * else the advertised address itself.
 */
function proxyPeer(k: KubernetesSettings, proxy: ProxyAddress): V1NetworkPolicyEgressRule {
  const pods = k.proxyPods;
  if (pods === undefined) return { to: [{ ipBlock: { cidr: `${proxy.ip}/${proxy.family === 4 ? 32 : 128}` } }], ports: [{ protocol: 'TCP', port: proxy.port }] };
  return {
    to: [{ namespaceSelector: { matchLabels: { [NAMESPACE_NAME_LABEL]: pods.namespace } }, podSelector: { matchLabels: { ...pods.labels } } }],
    ports: [{ protocol: 'TCP', port: pods.port ?? proxy.port }],
  };
}

/** The name of pod `podName`'s CA ConfigMap. */
export function egressCaMapName(podName: string): string {
  return `${podName}-egress-ca`;
}

/**
 * The ConfigMap holding berth's CA and the bundle for `pod` (as the API server answered its
 * create: its uid), owned by it.
 */
export function egressCaConfigMap(installation: string, pod: V1Pod, ca: PodProxyEgress['ca']): V1ConfigMap {
  const { name, namespace, uid } = pod.metadata ?? {};
  if (name === undefined || uid === undefined) throw new Error('a pod\'s CA map needs the pod as the API server made it (its name and uid)');
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: egressCaMapName(name),
      namespace,
      labels: { [LABEL.managed]: 'true', [LABEL.installation]: labelValue(installation) },
      annotations: { [LABEL.installation]: installation },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name, uid }],
    },
    data: { [baseName(EGRESS_CA_BUNDLE)]: ca.bundlePem, [baseName(EGRESS_CA_CERT)]: ca.caPem },
    immutable: true,
  };
}

/**
 * The NetworkPolicy of one tenant's allowlist pods: no ingress, and egress only over TCP to the
 * proxy's address (a /32 or /128). Not even DNS: the proxy resolves names itself.
 */
export function proxyNetworkPolicy(installation: string, tenant: string, k: KubernetesSettings, proxy: ProxyAddress): V1NetworkPolicy {
  const reach = proxyReach(proxy, k.proxyPods);
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: {
      name: tenantPolicyName(installation, tenant, reach),
      namespace: k.namespace,
      labels: { [LABEL.managed]: 'true', [LABEL.installation]: labelValue(installation), [LABEL.tenant]: labelValue(tenant), [NETWORK_LABEL]: reach },
      annotations: { [LABEL.installation]: installation, [LABEL.tenant]: tenant },
    },
    spec: {
      podSelector: { matchLabels: tenantMatchLabels(installation, tenant, reach) },
      policyTypes: ['Ingress', 'Egress'],
      ingress: [],
      egress: [proxyPeer(k, proxy)],
    },
  };
}

/** `pod` made for the proxy: its reach label, and berth's CA mounted read-only from its own map. */
export function withProxyEgress(pod: V1Pod, proxy: ProxyAddress, pods?: KubernetesSettings['proxyPods']): V1Pod {
  const spec = pod.spec!;
  const caMap = egressCaMapName(pod.metadata!.name!);
  const container = spec.containers[0]!;
  return {
    ...pod,
    metadata: { ...pod.metadata, labels: { ...pod.metadata?.labels, [NETWORK_LABEL]: proxyReach(proxy, pods) } },
    spec: {
      ...spec,
      volumes: [...spec.volumes ?? [], { name: CA_VOLUME, configMap: { name: caMap, defaultMode: 0o444 } }],
      containers: [{ ...container, volumeMounts: [...container.volumeMounts ?? [], { name: CA_VOLUME, mountPath: EGRESS_CA_DIR, readOnly: true }] }, ...spec.containers.slice(1)],
    },
  };
}

/** Creates the CA ConfigMap unless it is there (same name: the same pod's). */
export async function ensureEgressCaConfigMap(client: KubeClient, map: V1ConfigMap): Promise<void> {
  try {
    await client.core.createNamespacedConfigMap({ namespace: client.namespace, body: map, fieldValidation: 'Strict' });
  } catch (err) {
    if (apiStatusOf(err) !== 409) throw fromKubeError(client, err, `create configmap ${map.metadata!.name!}`);
  }
}

function baseName(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}
