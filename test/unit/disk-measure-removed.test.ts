import { describe, expect, it } from 'vitest';
import { SandboxMeasures } from '../../src/broker/sandbox-measures.js';
import type { LiveSandbox } from '../../src/broker/live-sandboxes.js';
import { SandboxNotFoundError } from '../../src/errors.js';
import { Logger } from '../../src/logging/logger.js';

/*
 * The periodic disk check measures the live sandboxes one at a time. A sandbox removed while the
 * pass runs (a session's close, the idle sweep) is not measured, and a measure that failed because
 * it went meanwhile is no warning: a crash recovery's clean-up of 1,000 sandboxes printed one
 * "container is gone" warning for each.
 */

describe('the disk check and sandboxes removed during its pass', () => {
  it('skips one removed before its turn, and does not warn for one removed while it was measured', async () => {
    const live = (key: string): LiveSandbox =>
      ({ digest: key, record: { key }, sandbox: { ref: key }, inflight: 0, lastActivityMs: 1, diskCheckedMs: 0 }) as unknown as LiveSandbox;
    const [a, b, c] = [live('a'), live('b'), live('c')];
    const held = new Map([a, b, c].map((l) => [l.digest, l]));
    const measured: string[] = [];
    const backend = {
      checkDiskLimit: async (sandbox: { ref: string }) => {
        measured.push(sandbox.ref);
        // Measuring a removes c (before its turn); b goes while it is measured.
        if (sandbox.ref === 'a') held.delete('c');
        if (sandbox.ref === 'b') {
          held.delete('b');
          throw new SandboxNotFoundError('container is gone');
        }
        return undefined;
      },
    };
    const warnings: string[] = [];
    const measures = new SandboxMeasures({
      lives: {
        all: () => [a, b, c], get: (d: string) => held.get(d), has: (d: string) => held.has(d), backendOf: () => backend, forget: async () => undefined,
      },
      jobs: { runningIn: () => [] },
      gate: { runBackground: <T>(fn: () => Promise<T>) => fn() },
      shutdown: new AbortController().signal,
      log: new Logger((_ns, msg, record) => void (record?.level === 'warn' && warnings.push(msg))),
    } as never);
    expect(await measures.enforceDiskLimits()).toEqual([]);
    expect(measured).toEqual(['a', 'b']);
    expect(warnings).toEqual([]);
  });

  it('each measure takes a slot of the start gate, behind the starts (a measure is an engine call)', async () => {
    const a = { digest: 'a', record: { key: 'a' }, sandbox: { ref: 'a' }, inflight: 0, lastActivityMs: 1, diskCheckedMs: 0 } as unknown as LiveSandbox;
    const events: string[] = [];
    const measures = new SandboxMeasures({
      lives: { all: () => [a], get: () => a, has: () => true, backendOf: () => ({ checkDiskLimit: async () => void events.push('measure') }), forget: async () => undefined },
      jobs: { runningIn: () => [] },
      gate: {
        runBackground: async <T>(fn: () => Promise<T>) => {
          events.push('slot');
          try {
            return await fn();
          } finally {
            events.push('freed');
          }
        },
      },
      shutdown: new AbortController().signal,
      log: Logger.silent(),
    } as never);
    await measures.enforceDiskLimits();
    expect(events).toEqual(['slot', 'measure', 'freed']);
  });
});
