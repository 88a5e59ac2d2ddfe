import type { V1Container, V1PodSpec } from '@kubernetes/client-node';

/*
 * The two admission plugins a namespace's compute limits go through, transcribed for what berth's
 * pods meet: LimitRanger (a `LimitRange` of type Container fills in missing limits from `default`
 * and missing requests from `defaultRequest`, or from `default` when it has none, then refuses a
 * container over `max` or under `min`), then ResourceQuota (each compute resource a quota names
 * must be set on every container, and the namespace's pods together must stay within `hard`).
 * Both refuse with 403 Forbidden, as the API server does. Not emulated: Pod and
 * PersistentVolumeClaim limit types, maxLimitRequestRatio, scopes, object-count quotas other than
 * `pods`, init containers.
 */

type Amounts = Record<string, string>;

export interface LimitRangeItem {
  type: string;
  default?: Amounts;
  defaultRequest?: Amounts;
  max?: Amounts;
  min?: Amounts;
}

export interface QuotaObject {
  name: string;
  hard: Amounts;
}

const SUFFIX: Record<string, number> = {
  m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
};

/** A resource quantity (`250m`, `0.5`, `512Mi`, `1G`) as a number of base units (cores, bytes). */
export function quantity(q: string): number {
  const m = /^([+-]?[0-9.]+)(?:[eE]([+-]?\d+))?([a-zA-Z]*)$/.exec(String(q));
  const factor = m === null ? undefined : SUFFIX[m[3] as string];
  if (m === null || factor === undefined) throw new RangeError(`quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': ${JSON.stringify(q)}`);
  return Number(m[1]) * 10 ** Number(m[2] ?? 0) * factor;
}

/** LimitRanger's defaults and bounds on each container of `spec` (mutated in place); the refusals. */
export function applyLimitRanges(spec: V1PodSpec, items: readonly LimitRangeItem[]): string[] {
  const problems: string[] = [];
  for (const item of items.filter((i) => i.type === 'Container')) {
    const defaultRequest = item.defaultRequest ?? item.default ?? {};
    for (const c of spec.containers) {
      const resources = (c.resources ??= {});
      for (const [name, v] of Object.entries(item.default ?? {})) (resources.limits ??= {})[name] ??= v;
      for (const [name, v] of Object.entries(defaultRequest)) (resources.requests ??= {})[name] ??= v;
      for (const [name, max] of Object.entries(item.max ?? {})) {
        const limit = resources.limits?.[name];
        if (limit === undefined) problems.push(`maximum ${name} usage per Container is ${max}.  No limit is specified`);
        else if (quantity(limit) > quantity(max)) problems.push(`maximum ${name} usage per Container is ${max}, but limit is ${limit}`);
      }
      for (const [name, min] of Object.entries(item.min ?? {})) {
        const request = resources.requests?.[name];
        if (request === undefined) problems.push(`minimum ${name} usage per Container is ${min}.  No request is specified`);
        else if (quantity(request) < quantity(min)) problems.push(`minimum ${name} usage per Container is ${min}, but request is ${request}`);
      }
    }
  }
  return problems;
}

/** `cpu` and `memory` in a quota mean their requests. */
function tracked(key: string): { kind: 'requests' | 'limits'; resource: string } | undefined {
  if (key === 'cpu' || key === 'memory' || key === 'ephemeral-storage') return { kind: 'requests', resource: key };
  const m = /^(requests|limits)\.(.+)$/.exec(key);
  return m === null ? undefined : { kind: m[1] as 'requests' | 'limits', resource: m[2] as string };
}

function amountOf(containers: readonly V1Container[], kind: 'requests' | 'limits', resource: string): number {
  return containers.reduce((sum, c) => sum + quantity(c.resources?.[kind]?.[resource] ?? '0'), 0);
}

/**
 * ResourceQuota's refusal of a new pod, or undefined when it fits: `others` are the specs of the
 * namespace's pods that still count (not Failed or Succeeded).
 */
export function quotaRefusal(spec: V1PodSpec, others: readonly V1PodSpec[], quotas: readonly QuotaObject[]): string | undefined {
  for (const q of quotas) {
    const missing: string[] = [];
    for (const key of Object.keys(q.hard)) {
      const t = tracked(key);
      if (t === undefined) continue;
      for (const c of spec.containers) if (c.resources?.[t.kind]?.[t.resource] === undefined) missing.push(`${t.kind}.${t.resource} for: ${c.name}`);
    }
    if (missing.length > 0) return `failed quota: ${q.name}: must specify ${missing.join('; ')}`;
    const over: { key: string; want: number; used: number; hard: string }[] = [];
    for (const [key, hard] of Object.entries(q.hard)) {
      const t = tracked(key);
      const want = t === undefined ? (key === 'pods' ? 1 : 0) : amountOf(spec.containers, t.kind, t.resource);
      const used = t === undefined ? (key === 'pods' ? others.length : 0) : others.reduce((sum, o) => sum + amountOf(o.containers, t.kind, t.resource), 0);
      if (want > 0 && used + want > quantity(hard)) over.push({ key, want, used, hard });
    }
    // The quota admission plugin's wording: each part a list of the exceeded resources as key=value.
    const part = (f: (o: (typeof over)[number]) => string): string => over.map((o) => `${o.key}=${f(o)}`).join(',');
    if (over.length > 0) return `exceeded quota: ${q.name}, requested: ${part((o) => canonical(o.want))}, used: ${part((o) => canonical(o.used))}, limited: ${part((o) => o.hard)}`;
  }
  return undefined;
}

/** A quantity as the API server prints one: whole binary units where they divide it (`2Gi`), millis for a fraction (`500m`). */
function canonical(n: number): string {
  if (!Number.isInteger(n)) return `${Math.round(n * 1000)}m`;
  for (const [suffix, unit] of [['Ti', 2 ** 40], ['Gi', 2 ** 30], ['Mi', 2 ** 20], ['Ki', 2 ** 10]] as const) {
    if (n >= unit && n % unit === 0) return `${n / unit}${suffix}`;
  }
  return String(n);
}
