import { PLACEHOLDER_PREFIX } from '../egress/placeholders.js';
import type { EgressEvent } from '../egress/types.js';
import type { EgressAuditEntry } from './state/egress-table.js';

/** A placeholder anywhere in a text (the prefix and its hex; any case, as names are folded). */
const PLACEHOLDER = new RegExp(`${PLACEHOLDER_PREFIX}[0-9a-f]+`, 'gi');
const MASK = `${PLACEHOLDER_PREFIX}[REDACTED]`;
/** The longest host or detail kept: a DNS name is at most 253 characters, a detail a line. */
const MAX_TEXT = 300;

/**
 * The audit row of one proxy decision. The event holds no value, but a hostile sandbox may put its
 * placeholder where the proxy reads text it reports (a CONNECT to `<placeholder>.evil.example`, a
 * ClientHello naming it): the audit keeps none, so each is masked (`berth-ph-[REDACTED]`).
 *
 * @example
 * egressAuditEntry(event) // { tenant: 'local', host: 'api.github.com', allowed: true, rule: 'allow api.github.com', ... }
 */
export function egressAuditEntry(e: EgressEvent): EgressAuditEntry {
  const { identity: id } = e;
  return {
    timeMs: e.timeMs, tenant: id.tenant, profile: id.profile, session: id.session ?? null, user: id.user ?? null, sandboxKey: id.sandboxKey,
    host: clean(e.host), port: e.port, channel: e.channel, allowed: e.allowed, rule: clean(e.rule), detail: e.detail === undefined ? null : clean(e.detail),
    bytesUp: e.bytesUp, bytesDown: e.bytesDown, credentials: [...e.credentials], status: e.status ?? null,
  };
}

function clean(text: string): string {
  const masked = text.replace(PLACEHOLDER, MASK);
  return masked.length > MAX_TEXT ? `${masked.slice(0, MAX_TEXT)}…` : masked;
}
