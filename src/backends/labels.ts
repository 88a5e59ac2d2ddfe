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
} as const;

/**
 * The labels of a warm-pool sandbox not claimed yet, in place of the identity's (it has none):
 * on the engines that keep pools by label (docker). Once set, a label never changes.
 */
export const POOL_LABEL = {
  /** Its pool's shape digest. */
  shape: 'berth.pool',
  /** The broker that made it (`pid:starttime:nonce`). */
  owner: 'berth.pool-owner',
} as const;
