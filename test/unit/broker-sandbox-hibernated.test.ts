import { describe, expect, it } from 'vitest';
import type { SandboxRecord } from '../../src/broker/state/sandbox-table.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { tempDir } from '../helpers/temp-dir.js';

function record(ref: string): SandboxRecord {
  return {
    digest: 'd1', backend: 'docker', tenant: 'acme', profile: 'default', key: 'session:s1', rule: 'auto:5', ephemeral: false,
    ref, name: `berth-${ref}`, hostDir: null, mount: null, createdMs: 1, lastUsedMs: 1, heldBy: 'p:1',
  };
}

describe('marking a sandbox hibernated', () => {
  it('marks only the record that still names the stopped sandbox: a restore recorded meanwhile by another process stays running', () => {
    const home = tempDir('berth-hibernated-');
    const hibernating = StateStore.open(home);
    const restoring = StateStore.open(home);
    try {
      hibernating.sandboxes.put(record('old-ref'));
      // Another process restores the sandbox from a snapshot while this one stops the old container.
      restoring.sandboxes.put(record('new-ref'));
      expect(hibernating.sandboxes.markHibernated('d1', 'old-ref', 1_000)).toBe(false);
      expect(restoring.sandboxes.get('d1')).toMatchObject({ ref: 'new-ref', hibernatedMs: null });

      expect(hibernating.sandboxes.markHibernated('d1', 'new-ref', 2_000)).toBe(true);
      expect(restoring.sandboxes.get('d1')).toMatchObject({ ref: 'new-ref', hibernatedMs: 2_000 });
      // A record gone meanwhile is not brought back.
      restoring.sandboxes.delete('d1');
      expect(hibernating.sandboxes.markHibernated('d1', 'new-ref', 3_000)).toBe(false);
      expect(hibernating.sandboxes.get('d1')).toBeUndefined();
    } finally {
      hibernating.close();
      restoring.close();
    }
  });
});
