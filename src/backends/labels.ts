/**
 * The keys of the labels every backend puts on its sandboxes (docker containers, Kubernetes pods):
 * one set, so a reaper or an operator's selector reads the same names on every engine.
 */
export const LABEL = {
  managed: 'berth.managed',
  installation: 'berth.installation',
  identity: 'berth.identity',
  key: 'berth.key',
  tenant: 'berth.tenant',
  profile: 'berth.profile',
  scope: 'berth.scope',
  lifecycle: 'berth.lifecycle',
  /** A warm-pool sandbox: its pool's shape digest (no identity, key or tenant label: it has none yet). */
  pool: 'berth.pool',
  /** The broker that made a warm-pool sandbox (`pid:starttime:nonce`). */
  poolOwner: 'berth.pool-owner',
} as const;
