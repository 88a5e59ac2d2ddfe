import { BackendUnavailableError } from '../../errors.js';
import { apiStatusOf, fromKubeError, type KubeClient } from './kube-client.js';
import type { KubernetesSettings } from './settings.js';

/**
 * In mode agent-sandbox, that the API server serves the agent-sandbox resources the settings use
 * (Sandboxes; SandboxClaims with a warm pool): a missing CRD answers 404 to a list, which would
 * otherwise surface at the first sandbox as "not found". One list of at most one object each.
 */
export async function checkAgentSandboxCrds(client: KubeClient, k: KubernetesSettings): Promise<void> {
  if (k.mode !== 'agent-sandbox') return;
  const wanted = [{ group: 'agents.x-k8s.io', plural: 'sandboxes' }];
  if (k.warmPool !== undefined) wanted.push({ group: 'extensions.agents.x-k8s.io', plural: 'sandboxclaims' });
  for (const { group, plural } of wanted) {
    try {
      await client.custom.listNamespacedCustomObject({ group, version: 'v1beta1', namespace: client.namespace, plural, limit: 1 });
    } catch (err) {
      if (apiStatusOf(err) === 404) {
        throw new BackendUnavailableError(
          `kubernetes: the API server at ${client.server} does not serve ${plural}.${group}/v1beta1; install kubernetes-sigs/agent-sandbox v0.5 (its CRDs${group.startsWith('extensions.') ? ', with the extensions,' : ''} and controller), or set kubernetes.mode: pods`,
          { cause: err },
        );
      }
      throw fromKubeError(client, err, `list ${plural}.${group}`);
    }
  }
}
