import { createHash } from 'node:crypto';

/*
 * Object names in the cluster, all derived from the identity digest (docs/design.md §3): lowercase
 * DNS-1123 names of at most 63 characters, so they also work as pod hostnames.
 */

const PERSISTENT_DIGEST_CHARS = 24;
const EPHEMERAL_DIGEST_CHARS = 16;
const UNIQUE_RE = /^[0-9a-f]{8,16}$/;

/** Deterministic name of a persistent sandbox's pod (or Sandbox): the same in every process of the installation. */
export function persistentPodName(digest: string): string {
  return `berth-${digest.slice(0, PERSISTENT_DIGEST_CHARS)}`;
}

/**
 * Name of one ephemeral sandbox's pod, new per creation: `unique` is 8-16 lowercase hex from the
 * caller's id source. The second `-` keeps the two forms apart.
 */
export function ephemeralPodName(digest: string, unique: string): string {
  if (!UNIQUE_RE.test(unique)) throw new RangeError(`ephemeral pod name suffix must be 8-16 lowercase hex digits, got ${JSON.stringify(unique)}`);
  return `berth-${digest.slice(0, EPHEMERAL_DIGEST_CHARS)}-${unique}`;
}

/** The PersistentVolumeClaim holding a persistent sandbox's /workspace and home. */
export function dataClaimName(podName: string): string {
  return `${podName}-data`;
}

/** The per-tenant NetworkPolicy of one installation, one per network reach (`egress`, `none`). */
export function tenantPolicyName(installation: string, tenant: string, network: string): string {
  const h = createHash('sha256').update(JSON.stringify([installation, tenant]), 'utf8').digest('hex');
  return `berth-tenant-${h.slice(0, 24)}-${network}`;
}
