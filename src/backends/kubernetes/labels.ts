import { createHash } from 'node:crypto';
import type { SandboxIdentity } from '../../scope/naming.js';
import type { LABEL as ENGINE_LABEL } from '../labels.js';

/**
 * The domain of every label and annotation key berth puts on cluster objects. Keys carry it as
 * their prefix (`berth.dev/managed`): Kubernetes reserves unprefixed keys for the user, and
 * agent-sandbox's claim controller copies only prefixed label keys whose domain its operator
 * allowed (its allowed-label-domains list), so a warm-pool pod can carry berth's labels at all.
 */
export const KEY_DOMAIN = 'berth.dev';

/**
 * Label keys: the same names as the Docker containers' (`berth.managed` there), under berth's
 * domain. Kubernetes label values are at most 63 characters of `[A-Za-z0-9._-]`, starting and
 * ending with an alphanumeric: a value that does not fit (a key such as `session:s1`) is carried
 * as `h.<40 hex of its sha256>` in the label and verbatim in the annotation of the same name.
 */
export const LABEL = {
  managed: `${KEY_DOMAIN}/managed`,
  installation: `${KEY_DOMAIN}/installation`,
  identity: `${KEY_DOMAIN}/identity`,
  key: `${KEY_DOMAIN}/key`,
  tenant: `${KEY_DOMAIN}/tenant`,
  profile: `${KEY_DOMAIN}/profile`,
  scope: `${KEY_DOMAIN}/scope`,
  lifecycle: `${KEY_DOMAIN}/lifecycle`,
} as const satisfies Record<keyof typeof ENGINE_LABEL, string>;

/** Annotation carrying the full identity digest (the label has its first `IDENTITY_LABEL_CHARS`). */
export const IDENTITY_ANNOTATION = `${KEY_DOMAIN}/identity`;

/** 160 bits of the digest: a label value holds at most 63 characters. */
const IDENTITY_LABEL_CHARS = 40;

const LABEL_VALUE_RE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const LABEL_VALUE_MAX = 63;
const HASHED_CHARS = 40;

/** What a sandbox's labels and annotations are made of. */
export interface LabelInput {
  identity: SandboxIdentity;
  /** Hex sha256 of the identity. */
  digest: string;
  ephemeral: boolean;
  /** The scope mode / auto row that produced the key. */
  rule: string;
}

/**
 * `value` when it is a valid label value, else `h.<40 hex of its sha256>`. The hashed form only
 * informs people and narrows selectors; no decision rests on it alone except the tenant's, whose
 * names come from the operator's configuration, never from a caller.
 */
export function labelValue(value: string): string {
  if (value.length <= LABEL_VALUE_MAX && LABEL_VALUE_RE.test(value)) return value;
  return `h.${createHash('sha256').update(value, 'utf8').digest('hex').slice(0, HASHED_CHARS)}`;
}

/** The identity label's value: the first 160 bits of the digest. */
function identityLabel(digest: string): string {
  return digest.slice(0, IDENTITY_LABEL_CHARS);
}

/** Labels of every object berth creates for a sandbox (pod or Sandbox, PVC). */
export function sandboxLabels(input: LabelInput): Record<string, string> {
  const { identity } = input;
  return {
    [LABEL.managed]: 'true',
    [LABEL.installation]: labelValue(identity.installation),
    [LABEL.identity]: identityLabel(input.digest),
    [LABEL.key]: labelValue(identity.key),
    [LABEL.tenant]: labelValue(identity.tenant),
    [LABEL.profile]: labelValue(identity.profile ?? ''),
    [LABEL.scope]: labelValue(input.rule),
    [LABEL.lifecycle]: input.ephemeral ? 'ephemeral' : 'persistent',
  };
}

/** The readable values, verbatim, for people (`kubectl describe`) and for checks on adoption. */
export function sandboxAnnotations(input: LabelInput): Record<string, string> {
  const { identity } = input;
  return {
    [LABEL.installation]: identity.installation,
    [IDENTITY_ANNOTATION]: input.digest,
    [LABEL.key]: identity.key,
    [LABEL.tenant]: identity.tenant,
    [LABEL.profile]: identity.profile ?? '',
    [LABEL.scope]: input.rule,
  };
}

/** Label selector (the API's string form) of every berth object of one installation. */
export function installationSelector(installation: string): string {
  return `${LABEL.managed}=true,${LABEL.installation}=${labelValue(installation)}`;
}

/** Label selector of the objects of one sandbox identity within an installation. */
export function identitySelector(installation: string, digest: string): string {
  return `${installationSelector(installation)},${LABEL.identity}=${identityLabel(digest)}`;
}

/**
 * The network reach a pod was made for (`egress` or `none`): NetworkPolicies add up, so each
 * reach has its own policy and a pod is picked by exactly one.
 */
export const NETWORK_LABEL = `${KEY_DOMAIN}/network`;

/** Labels that pick one tenant's sandboxes of one installation with one network reach (the NetworkPolicy's pod selector). */
export function tenantMatchLabels(installation: string, tenant: string, network: string): Record<string, string> {
  return {
    [LABEL.managed]: 'true',
    [LABEL.installation]: labelValue(installation),
    [LABEL.tenant]: labelValue(tenant),
    [NETWORK_LABEL]: network,
  };
}

const LABEL_NAME_RE = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const LABEL_PREFIX_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** What is wrong with a label key an operator wrote (`k8s-app`, `example.com/role`), or undefined. */
export function labelKeyProblem(key: string): string | undefined {
  const slash = key.lastIndexOf('/');
  const prefix = slash < 0 ? undefined : key.slice(0, slash);
  const name = key.slice(slash + 1);
  if (prefix !== undefined && (prefix.length > 253 || !LABEL_PREFIX_RE.test(prefix))) return `label key "${key}": its prefix is not a lowercase DNS subdomain`;
  if (name.length > LABEL_VALUE_MAX || !LABEL_NAME_RE.test(name)) return `label key "${key}": its name is not 1 to 63 letters, digits, "-", "_" or "." starting and ending with a letter or digit`;
  return undefined;
}

/** What is wrong with a label value an operator wrote, or undefined. */
export function labelValueProblem(value: string): string | undefined {
  if (value.length <= LABEL_VALUE_MAX && LABEL_VALUE_RE.test(value)) return undefined;
  return `label value "${value}" is not at most 63 letters, digits, "-", "_" or "." starting and ending with a letter or digit`;
}
