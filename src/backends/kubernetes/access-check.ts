import { BackendUnavailableError } from '../../errors.js';
import { fromKubeError, type KubeClient } from './kube-client.js';
import { REQUIRED_PERMISSIONS } from './permissions.js';
import type { KubernetesSettings } from './settings.js';

/** One permission as RBAC names it. */
export interface Permission {
  apiGroup: string;
  resource: string;
  verb: string;
}

/**
 * The permissions these settings use (a subset of REQUIRED_PERMISSIONS, which deploy/rbac.yaml
 * grants): pods and their exec always (agent-sandbox execs into the controller's pod too), claims
 * in mode pods, Sandboxes in mode agent-sandbox, SandboxClaims with a warm pool, NetworkPolicies
 * when berth makes them, ConfigMaps (berth's egress CA) for sandboxes in egress mode allowlist
 * (`proxied`).
 */
export function permissionsFor(k: KubernetesSettings, proxied = false): Permission[] {
  const used = (resource: string): boolean => {
    switch (resource) {
      case 'persistentvolumeclaims': return k.mode === 'pods';
      case 'configmaps': return proxied;
      case 'networkpolicies': return k.networkPolicy;
      case 'sandboxes': return k.mode === 'agent-sandbox';
      case 'sandboxclaims': return k.mode === 'agent-sandbox' && k.warmPool !== undefined;
      default: return true;
    }
  };
  return REQUIRED_PERMISSIONS.filter((p) => used(p.resource)).flatMap((p) => p.verbs.map((verb) => ({ apiGroup: p.apiGroup, resource: p.resource, verb })));
}

function describe(p: Permission): string {
  return `${p.verb} ${p.apiGroup === '' ? '' : `${p.apiGroup}/`}${p.resource}`;
}

/**
 * Asks the API server, as berth's own credentials, whether it may do each call the settings
 * need (SelfSubjectAccessReview, which every authenticated user may create). The first request
 * also tells an unreachable API server (BackendUnavailableError, exit 125); a refusal lists
 * every missing permission and the fix. Never a fallback.
 */
export async function checkAccess(client: KubeClient, k: KubernetesSettings, proxied = false): Promise<void> {
  const wanted = permissionsFor(k, proxied);
  const answers = await Promise.all(wanted.map(async (p) => {
    const [resource, subresource] = p.resource.split('/') as [string, string | undefined];
    try {
      const review = await client.authorization.createSelfSubjectAccessReview({
        body: {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SelfSubjectAccessReview',
          spec: { resourceAttributes: { namespace: client.namespace, group: p.apiGroup, resource, verb: p.verb, ...(subresource === undefined ? {} : { subresource }) } },
        },
      });
      return { p, allowed: review.status?.allowed === true };
    } catch (err) {
      throw fromKubeError(client, err, 'check berth\'s permissions (create selfsubjectaccessreviews.authorization.k8s.io)');
    }
  }));
  const missing = answers.filter((a) => !a.allowed).map((a) => describe(a.p));
  if (missing.length > 0) {
    throw new BackendUnavailableError(
      `kubernetes: berth may not ${missing.join(', ')} in namespace "${client.namespace}" at ${client.server}; apply deploy/rbac.yaml for berth's user or service account (kubectl apply -n ${client.namespace} -f deploy/rbac.yaml)`,
    );
  }
}
