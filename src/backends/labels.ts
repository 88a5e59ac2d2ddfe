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
