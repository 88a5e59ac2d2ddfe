import { createHash } from 'node:crypto';
import type { PoolShape, SandboxSpec } from '../backend.js';
import { LABEL, POOL_LABEL } from '../labels.js';
import type { DockerSettings } from './settings.js';

/**
 * The docker settings that fix a container at creation, as a digest: the pool shape. Volumes are
 * not pooled: which ones a sandbox binds depends on its tenant, and a bind is fixed at create.
 */
export function dockerShapeOf(d: DockerSettings): { digest: string; perTenant: boolean } | { unpoolable: string } {
  if (d.volumes.length > 0) {
    return { unpoolable: 'docker.volumes are bound per tenant when a sandbox is created, so its sandboxes cannot be made ahead; drop warmPool or the volumes of that profile' };
  }
  const fixed = {
    image: d.image, network: d.network, memoryMb: d.memoryMb, cpus: d.cpus, pidsLimit: d.pidsLimit, shmSizeMb: d.shmSizeMb,
    tmpSizeMb: d.tmpSizeMb, ephemeralSizeMb: d.ephemeralSizeMb, runAsHostUser: d.runAsHostUser, diskMb: d.diskMb,
  };
  return { digest: createHash('sha256').update(JSON.stringify(fixed)).digest('hex'), perTenant: d.network !== 'none' };
}

/**
 * The spec a pool container is created from: no identity of anyone (an empty key and digest),
 * the pool's tenant only when its network is that tenant's. Never recorded in the store.
 */
export function poolSpec(installation: string, shape: PoolShape<DockerSettings>): SandboxSpec<DockerSettings> {
  return {
    identity: { installation, tenant: shape.tenant ?? '', profile: undefined, key: `pool:${shape.digest.slice(0, 12)}` },
    digest: '', dirName: '', ephemeral: true, mount: null, rule: 'pool', section: shape.section,
  };
}

/** A pool container's labels: berth's, this installation's, its shape and maker; nothing of an identity. */
export function poolLabels(installation: string, shape: PoolShape<DockerSettings>): Record<string, string> {
  return {
    [LABEL.managed]: 'true',
    [LABEL.installation]: installation,
    [LABEL.lifecycle]: 'ephemeral',
    [POOL_LABEL.shape]: shape.digest,
    [POOL_LABEL.owner]: shape.owner,
  };
}

/** Name of an unclaimed pool container (a claim renames it to the identity's `ephemeralName`). */
export function poolName(shapeDigest: string, random8hex: string): string {
  return `berth-pool-${shapeDigest.slice(0, 12)}-${random8hex}`;
}
