import { describe, expect, it } from 'vitest';
import type { Sandbox, SandboxSpec } from '../../src/backends/backend.js';
import { DEFAULT_HELPER_OUTPUT_BYTES } from '../../src/backends/plumbing/exec-once.js';
import { LocalBackend } from '../../src/backends/local/local-backend.js';
import { BerthError } from '../../src/errors.js';
import { pidsWithArg } from './shell-local-transport.js';
import { tempDir } from '../helpers/temp-dir.js';

/** The local backend's execOnce: a helper that prints too much is stopped, with memory bounded. */
describe('LocalBackend execOnce output bound', () => {
  async function sandbox(): Promise<Sandbox> {
    const berthHome = tempDir('berth-helper-');
    const spec: SandboxSpec = {
      identity: { installation: 'test', tenant: 'local', profile: 'default', key: 'session:helper' },
      digest: 'ab'.repeat(32),
      dirName: 'helper-test',
      ephemeral: true,
      mount: null,
      rule: 'auto:5',
      section: undefined,
    };
    return new LocalBackend({ berthHome }).ensure(spec, undefined);
  }

  it('rejects with helper_output_too_large past the default cap, kills the helper, and keeps RSS bounded', async () => {
    const sb = await sandbox();
    // A marker argument so the test can see whether the helper's processes are gone.
    const marker = 'berth-flood-200000007';
    global.gc?.();
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => { peak = Math.max(peak, process.memoryUsage().rss); }, 5);
    const err = await sb.execOnce(['sh', '-c', 'head -c 200000007 /dev/zero; sleep 30', marker], { timeoutMs: 60_000 })
      .catch((e: unknown) => e);
    clearInterval(sampler);
    peak = Math.max(peak, process.memoryUsage().rss);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as BerthError).code).toBe('helper_output_too_large');
    expect((err as BerthError).message).toContain(`${DEFAULT_HELPER_OUTPUT_BYTES} bytes`);
    expect(peak - before, `RSS grew by ${Math.round((peak - before) / 1e6)} MB`).toBeLessThan(300 * 1024 * 1024);
    const deadline = Date.now() + 5_000;
    while (pidsWithArg(marker).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(pidsWithArg(marker)).toEqual([]);
  });

  it("applies the caller's bound to stdout and stderr together", async () => {
    const sb = await sandbox();
    const both = (n: number): string[] => ['sh', '-c', `head -c ${n} /dev/zero; head -c ${n} /dev/zero >&2`];
    await expect(sb.execOnce(both(600), { maxOutputBytes: 1000 })).rejects.toMatchObject({ code: 'helper_output_too_large' });
    const ok = await sb.execOnce(both(500), { maxOutputBytes: 1000 });
    expect([ok.exitCode, ok.stdout.length, ok.stderr.length]).toEqual([0, 500, 500]);
  });
});
