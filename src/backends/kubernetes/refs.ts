import { BerthError } from '../../errors.js';

/*
 * The ref berth records for a sandbox on a cluster: what kind of object it is, its namespace and
 * its name (`pod:berth/berth-0123...`). The cluster is the installation's one connection
 * (settings.ts, kubernetesUseProblems), so a ref alone is enough for the reapers to find it.
 */

/** The object behind a sandbox: a Pod (mode pods), a Sandbox or a SandboxClaim (mode agent-sandbox). */
export type RefKind = 'pod' | 'sandbox' | 'claim';

export interface SandboxRef {
  kind: RefKind;
  namespace: string;
  name: string;
}

const DNS_LABEL = '[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?';
const REF_RE = new RegExp(`^(pod|sandbox|claim):(${DNS_LABEL})/(${DNS_LABEL})$`);

export function formatRef(ref: SandboxRef): string {
  return `${ref.kind}:${ref.namespace}/${ref.name}`;
}

/**
 * A recorded ref, checked: only names the API accepts, so a record can never steer a request to
 * another path of the API server.
 */
export function parseRef(ref: string): SandboxRef {
  const m = REF_RE.exec(ref);
  if (m === null) {
    throw new BerthError('invalid_ref', `"${ref}" is not a kubernetes sandbox ref (pod|sandbox|claim:<namespace>/<name>); was the record written by another backend?`);
  }
  return { kind: m[1] as RefKind, namespace: m[2] as string, name: m[3] as string };
}
