/**
 * Every API call the kubernetes backend makes, as RBAC rules: the Role in deploy/rbac.yaml must
 * grant exactly these (a test holds the two together), so the backend runs with least privilege.
 * `pods/exec` needs `create` (newer API servers authorize a WebSocket exec as create, feature
 * gate AuthorizePodWebsocketUpgradeCreatePermission) and `get` (older ones authorize its GET).
 * `watch`: berth waits for a pod (or a claim) by a watch (`GET ...?watch=1`), which RBAC
 * authorizes as its own verb, apart from `list`.
 */
export const REQUIRED_PERMISSIONS: readonly { apiGroup: string; resource: string; verbs: readonly string[] }[] = [
  { apiGroup: '', resource: 'pods', verbs: ['create', 'delete', 'get', 'list', 'watch'] },
  { apiGroup: '', resource: 'pods/exec', verbs: ['create', 'get'] },
  // list: a stopped (hibernated) persistent sandbox has no pod, only its data claim.
  { apiGroup: '', resource: 'persistentvolumeclaims', verbs: ['create', 'delete', 'get', 'list'] },
  // berth's egress CA for pods in egress mode allowlist: one immutable map per pod, owned by it (the
  // cluster's garbage collector deletes it with the pod).
  { apiGroup: '', resource: 'configmaps', verbs: ['create'] },
  // Created once per tenant and network reach and read back (each one, and the list at start-up) to
  // compare with what berth writes; never changed or deleted by berth.
  { apiGroup: 'networking.k8s.io', resource: 'networkpolicies', verbs: ['create', 'get', 'list'] },
  { apiGroup: 'agents.x-k8s.io', resource: 'sandboxes', verbs: ['create', 'delete', 'get', 'list'] },
  { apiGroup: 'extensions.agents.x-k8s.io', resource: 'sandboxclaims', verbs: ['create', 'delete', 'get', 'list', 'watch'] },
];
