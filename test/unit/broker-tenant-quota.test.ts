import { statfsSync } from 'node:fs';
import { totalmem } from 'node:os';
import { describe, expect, it } from 'vitest';
import type { SandboxRecord, TenantQuota } from '../../src/broker/state/sandbox-table.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { tenantQuota } from '../../src/broker/tenant-quota.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { tempDir } from '../helpers/temp-dir.js';

function record(tenant: string, n: number, reserves: { memoryMb?: number; diskMb?: number } = {}): SandboxRecord {
  return {
    digest: `${tenant}-${n}`, backend: 'docker', tenant, profile: 'default', key: `session:s${n}`, rule: 'auto:5', ephemeral: true,
    ref: '', name: `n${n}`, hostDir: null, mount: null, createdMs: 0, lastUsedMs: 0, claimOwner: 'x', memoryMb: reserves.memoryMb ?? null, diskMb: reserves.diskMb ?? null,
  };
}

const ROOMY: TenantQuota = { sandboxes: 1_000, memoryMb: 1_000_000, diskMb: 1_000_000 };

describe('a tenant\'s quota on the sandboxes it holds, enforced by the claim itself', () => {
  it('counts sandboxes, memory limits and disk bounds of one tenant only; a taken claim is told from an over-quota one', () => {
    const store = StateStore.open(tempDir('berth-quota-'));
    try {
      const two: TenantQuota = { ...ROOMY, sandboxes: 2 };
      expect(store.sandboxes.claim(record('acme', 1), two)).toBe('claimed');
      expect(store.sandboxes.claim(record('acme', 1), two)).toBe('taken');
      expect(store.sandboxes.claim(record('acme', 2), two)).toBe('claimed');
      expect(store.sandboxes.claim(record('acme', 3), two)).toBe('over');
      expect(store.sandboxes.claim(record('globex', 1), two)).toBe('claimed');

      const mem: TenantQuota = { ...ROOMY, memoryMb: 3000 };
      expect(store.sandboxes.claim(record('mem', 1, { memoryMb: 2048 }), mem)).toBe('claimed');
      expect(store.sandboxes.claim(record('mem', 2, { memoryMb: 1024 }), mem)).toBe('over');
      expect(store.sandboxes.claim(record('mem', 3, { memoryMb: 952 }), mem)).toBe('claimed');
      // A sandbox its backend does not bound reserves nothing.
      expect(store.sandboxes.claim(record('mem', 4), mem)).toBe('claimed');

      const disk: TenantQuota = { ...ROOMY, diskMb: 10_240 };
      expect(store.sandboxes.claim(record('disk', 1, { diskMb: 10_240 }), disk)).toBe('claimed');
      expect(store.sandboxes.claim(record('disk', 2, { diskMb: 1 }), disk)).toBe('over');

      expect(Object.fromEntries(store.sandboxes.tenantUsage())).toEqual({
        acme: { sandboxes: 2, memoryMb: 0, diskMb: 0 },
        disk: { sandboxes: 1, memoryMb: 0, diskMb: 10_240 },
        globex: { sandboxes: 1, memoryMb: 0, diskMb: 0 },
        mem: { sandboxes: 3, memoryMb: 3000, diskMb: 0 },
      });
      store.sandboxes.delete('acme-1');
      expect(store.sandboxes.claim(record('acme', 3), two)).toBe('claimed');
    } finally {
      store.close();
    }
  });

  it('claims from two connections, interleaved, never pass the quota together', () => {
    const home = tempDir('berth-quota-');
    const stores = [StateStore.open(home), StateStore.open(home)];
    try {
      const quota: TenantQuota = { ...ROOMY, sandboxes: 5 };
      const outcomes = Array.from({ length: 20 }, (_, i) => stores[i % 2]!.sandboxes.claim(record('acme', i), quota));
      expect(outcomes.filter((o) => o === 'claimed')).toHaveLength(5);
      expect(stores[0]!.sandboxes.tenantUsage('acme').get('acme')?.sandboxes).toBe(5);
    } finally {
      for (const s of stores) s.close();
    }
  });

  it('defaults: 50 sandboxes, memory limits up to the host\'s memory, disk bounds up to the size of BERTH_HOME\'s filesystem', () => {
    const home = tempDir('berth-quota-');
    const fs = statfsSync(home);
    expect(tenantQuota(parseConfig({}).limits, home)).toEqual({
      sandboxes: 50, memoryMb: Math.floor(totalmem() / 2 ** 20), diskMb: Math.floor((fs.blocks * fs.bsize) / 2 ** 20),
    });
    expect(tenantQuota(parseConfig({ limits: { sandboxes: 3, memoryMb: 4096, diskMb: 8192 } }).limits, home)).toEqual({ sandboxes: 3, memoryMb: 4096, diskMb: 8192 });
  });
});
