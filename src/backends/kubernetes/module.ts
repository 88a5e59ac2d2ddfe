import { defineBackend } from '../module.js';
import { resourcesOf, WORKSPACE } from './manifests.js';
import { kubernetesSettings } from './settings.js';

/**
 * Sandboxes as pods on a Kubernetes cluster: plain Pods or agent-sandbox resources,
 * each process over a pods/exec WebSocket. A pod has its own pid namespace (shared only with its
 * pause container, PID 1, which a sandbox user cannot signal), so the warden may end every
 * process the shell can signal.
 */
export const kubernetesModule = defineBackend({
  name: 'kubernetes',
  traits: {
    // Pods run on cluster nodes: a dir on berth's host can never be bound into them.
    mountsHostDirs: false,
    isolation: 'container',
    jobsDieWithSandbox: true,
    runsWithoutBerth: true,
    listsByLabel: true,
    containerKeying: true,
    hostPaths: false,
    ownsProcessTable: true,
    // allowlist: the pod's NetworkPolicy admits only the shared listener of berth's proxy (berth
    // cannot enter a pod's network namespace on a cluster node); none: it admits nothing.
    egressModes: ['open', 'allowlist', 'none'],
    egressProxyReach: 'shared',
  },
  settings: kubernetesSettings,
  images: { of: (s) => s.image, with: (s, image) => ({ ...s, image }) },
  // The proxy holds them to the ranges their NetworkPolicy blocks, for a name that resolves there.
  egressDenied: (s) => s.blockedCidrs.map((cidr) => ({ cidr, label: 'kubernetes.blockedCidrs' })),
  // Cluster resources, not this host's: counted only where the settings bound them.
  reservation: (s) => ({ memoryMb: s.memoryMb, diskMb: s.ephemeralStorageMb }),
  isolationNoteFor: (s) => {
    const r = resourcesOf(s);
    const amounts = (a: Record<string, string> | undefined): string => Object.entries(a ?? {}).map(([k, v]) => `${k} ${v}`).join(', ');
    return 'runs in a pod on a Kubernetes cluster (non-root, restricted security context, no service-account token, a per-tenant NetworkPolicy); host dirs are never mounted; ' +
      `it requests ${amounts(r.requests)} and is limited to ${amounts(r.limits)}`;
  },
  words: {
    where: (b) => b.persistent
      ? `Commands run in a pod on a Kubernetes cluster, isolated from berth's host (sandbox "${b.sandboxKey}"), starting in ${b.cwd}.`
      : `Commands run in a pod on a Kubernetes cluster created for this session, isolated from berth's host, starting in ${b.cwd}.`,
    persistence: (b) => b.persistent
      ? `The sandbox is persistent: files in ${WORKSPACE} and the home directory persist across sessions on a PersistentVolumeClaim until the sandbox is removed; /tmp and running processes do not survive a restart of the pod.`
      : 'The sandbox is ephemeral: its files vanish when this session closes.',
  },
  defaultCwd: () => WORKSPACE,
  async create(ctx) {
    const { KubernetesBackend } = await import('./kubernetes-backend.js');
    return new KubernetesBackend({ installation: ctx.installation, log: ctx.log, sections: ctx.places ?? [] });
  },
});
