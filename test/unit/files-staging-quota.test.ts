import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { StagingFullError, StagingLedger } from '../../src/files/staging-quota.js';
import { tempDir } from '../helpers/temp-dir.js';

/** A user-level staging dir of tenant `t` (staging/<tenant>/<session>/<user>). */
function userDir(home: string, tenant = 't'): string {
  const dir = join(home, 'staging', tenant, 's'.repeat(32), 'u'.repeat(32));
  mkdirSync(dir, { recursive: true });
  return dir;
}

describe('StagingLedger', () => {
  it('counts committed exports by their recorded size and walks anything else (content + 512 per entry)', async () => {
    const home = tempDir('berth-quota-');
    const dir = userDir(home);
    // A committed export: trusted by its name, not walked.
    mkdirSync(join(dir, '0123456789abcdef-1000'));
    writeFileSync(join(dir, '0123456789abcdef-1000', 'f'), Buffer.alloc(5));
    // Anything else (an older berth's export, another process's partial) is walked: dir 512 + file 512 + 100.
    mkdirSync(join(dir, 'legacy', 'deep'), { recursive: true });
    // A name like a committed export below the export level is not trusted.
    mkdirSync(join(dir, 'legacy', 'deep', 'fedcba9876543210-0'));
    writeFileSync(join(dir, 'legacy', 'deep', 'fedcba9876543210-0', 'big'), Buffer.alloc(100));
    const lease = await new StagingLedger(home).begin('t', 1000 + 4 * 512 + 100 + 10);
    lease.add(10, 'x');
    const err = (() => {
      try {
        lease.add(1, 'export of "/w/y"');
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(err).toBeInstanceOf(StagingFullError);
    expect((err as Error).message).toContain(`(limits.stagingBytes; ${1000 + 4 * 512 + 100} bytes are staged or being exported by other calls)`);
  });

  it('is per tenant, and counts exports in flight in this process (pending) against the others', async () => {
    const home = tempDir('berth-quota-');
    const dirA = userDir(home, 'a');
    const ledger = new StagingLedger(home);
    const one = await ledger.begin('a', 1000);
    const two = await ledger.begin('a', 1000);
    const other = await ledger.begin('b', 1000);
    one.add(600, 'one');
    expect(() => two.add(500, 'two')).toThrow(StagingFullError);
    other.add(900, 'other');
    one.release();
    const three = await ledger.begin('a', 1000);
    three.add(1000, 'three');
    // An export that began before `three` committed counts it from memory, even before it is on disk.
    const four = await ledger.begin('a', 1000);
    mkdirSync(join(dirA, three.committedName()));
    three.commit();
    expect(() => four.add(1, 'four')).toThrow(StagingFullError);
    // One that begins after finds it on disk by its name.
    const five = await ledger.begin('a', 1000);
    expect(() => five.add(1, 'five')).toThrow(StagingFullError);
    expect(() => two.add(1, 'two')).toThrow(/staging lease used after it ended/);
  });
});
