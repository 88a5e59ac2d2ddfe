import { describe, expect, it } from 'vitest';
import { AuditRecorder } from '../../src/broker/audit.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import type { EgressEvent } from '../../src/egress/types.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * The egress audit in a real state.db: every proxy decision a row, read back per tenant with the
 * filters of `berth audit --egress`, pruned with the call audit, and never a placeholder kept.
 */

const DAY_MS = 24 * 60 * 60 * 1000;
const PLACEHOLDER = 'berth-ph-0123456789abcdef0123456789abcdef';

function event(over: Partial<EgressEvent> & { tenant?: string; session?: string; user?: string; profile?: string } = {}): EgressEvent {
  const { tenant = 'acme', session, user, profile = 'bot', ...rest } = over;
  return {
    timeMs: Date.now(), host: 'api.example.com', port: 443, channel: 'tls-tunnel', allowed: true, rule: 'allow api.example.com',
    bytesUp: 10, bytesDown: 20, credentials: [],
    identity: { tenant, profile, sandboxKey: `session:${session ?? 'x'}`, ...(session === undefined ? {} : { session }), ...(user === undefined ? {} : { user }) },
    ...rest,
  };
}

function recorder(store: StateStore): AuditRecorder {
  return new AuditRecorder(store.audit, { retentionDays: 7, log: () => {}, observer: { callEnded: () => {} }, egress: store.egress });
}

describe('egress audit (real SQLite file)', () => {
  it('keeps every field of a decision, newest first, and filters by tenant, profiles, user, session and allowed', () => {
    const home = tempDir('berth-egress-audit-');
    const store = StateStore.open(home);
    try {
      const audit = recorder(store);
      audit.recordEgress(event({ session: 's1', credentials: ['GITHUB_TOKEN', 'NPM_TOKEN'], channel: 'intercepted', status: 200 }));
      audit.recordEgress(event({ session: 's1', host: 'evil.example', allowed: false, rule: 'not in egress.allow', bytesUp: 0, bytesDown: 0, status: 403 }));
      audit.recordEgress(event({ session: 's2', user: 'telegram:42', profile: 'other', detail: '10.0.0.1' }));
      audit.recordEgress(event({ tenant: 'rival', session: 's1' }));

      const s1 = audit.listEgress({ tenant: 'acme', session: 's1' });
      expect(s1.map((e) => e.host)).toEqual(['evil.example', 'api.example.com']);
      expect(s1[0]).toMatchObject({ allowed: false, rule: 'not in egress.allow', status: 403, detail: null, credentials: [] });
      expect(s1[1]).toEqual({
        timeMs: expect.any(Number), tenant: 'acme', profile: 'bot', session: 's1', user: null, sandboxKey: 'session:s1',
        host: 'api.example.com', port: 443, channel: 'intercepted', allowed: true, rule: 'allow api.example.com', detail: null,
        bytesUp: 10, bytesDown: 20, credentials: ['GITHUB_TOKEN', 'NPM_TOKEN'], status: 200,
      });
      expect(audit.listEgress({ tenant: 'acme', allowed: false }).map((e) => e.host)).toEqual(['evil.example']);
      expect(audit.listEgress({ tenant: 'acme', allowed: true })).toHaveLength(2);
      expect(audit.listEgress({ tenant: 'acme', user: 'telegram:42' })).toMatchObject([{ session: 's2', detail: '10.0.0.1' }]);
      expect(audit.listEgress({ tenant: 'acme', profiles: ['bot'] })).toHaveLength(2);
      expect(audit.listEgress({ tenant: 'acme', profiles: [] })).toHaveLength(0);
      expect(audit.listEgress({ tenant: 'acme', limit: 1 })).toHaveLength(1);
      expect(audit.listEgress({ tenant: 'rival' })).toHaveLength(1);
      expect(audit.listEgress({ tenant: 'nobody' })).toEqual([]);
    } finally {
      store.close();
    }
  });

  it('queued decisions reach the file at close; another process reads them', () => {
    const home = tempDir('berth-egress-audit-');
    const a = StateStore.open(home);
    recorder(a).recordEgress(event({ session: 'q' }));
    a.close();
    const b = StateStore.open(home);
    try {
      expect(b.egress.list({ tenant: 'acme', session: 'q' })).toHaveLength(1);
    } finally {
      b.close();
    }
  });

  it('a placeholder a sandbox put in a host name or a ClientHello is masked: the audit never keeps one', () => {
    const home = tempDir('berth-egress-audit-');
    const store = StateStore.open(home);
    try {
      const audit = recorder(store);
      audit.recordEgress(event({ host: `${PLACEHOLDER}.evil.example`, allowed: false, rule: 'exfiltration', detail: 'a placeholder of GITHUB_TOKEN' }));
      audit.recordEgress(event({ allowed: false, rule: 'fronting', detail: `fronting: the ClientHello names "${PLACEHOLDER.toUpperCase().replace('BERTH-PH-', 'Berth-Ph-')}.x"` }));
      const rows = audit.listEgress({ tenant: 'acme' });
      expect(JSON.stringify(rows)).not.toMatch(/0123456789abcdef/i);
      expect(rows[1]!.host).toBe('berth-ph-[REDACTED].evil.example');
      expect(rows[0]!.detail).toBe('fronting: the ClientHello names "berth-ph-[REDACTED].x"');
    } finally {
      store.close();
    }
  });

  it('audit.retentionDays prunes egress decisions with the call audit', () => {
    const home = tempDir('berth-egress-audit-');
    const store = StateStore.open(home);
    try {
      const audit = recorder(store);
      audit.recordEgress(event({ session: 'old', timeMs: Date.now() - 8 * DAY_MS }));
      audit.recordEgress(event({ session: 'new', timeMs: Date.now() - 6 * DAY_MS }));
      store.egress.flush();
      audit.prune();
      expect(audit.listEgress({ tenant: 'acme' }).map((e) => e.session)).toEqual(['new']);
    } finally {
      store.close();
    }
  });
});
