import { expect, it } from 'vitest';
import { LiveCap } from '../../src/broker/live-cap.js';
import type { LiveSandbox } from '../../src/broker/live-sandboxes.js';
import { StartGate } from '../../src/broker/start-gate.js';
import { BerthError } from '../../src/errors.js';
import { Logger } from '../../src/logging/logger.js';

/*
 * limits.liveSandboxes (broker/live-cap.ts), with live sandboxes as plain records and hibernation a
 * function that drops one from the live set: which one goes, when a call waits and when it is refused.
 */

interface Fake {
  key: string;
  ephemeral?: boolean;
  hibernateMs?: number;
  inflight?: number;
  lastActivityMs: number;
  busy?: boolean;
  job?: boolean;
}

function setUp(fakes: Fake[], max: number, waitMs = 200) {
  const live = new Set<LiveSandbox>(fakes.map((f) => ({
    digest: f.key, record: { key: f.key, ephemeral: f.ephemeral === true }, hibernateMs: f.hibernateMs ?? 600_000,
    inflight: f.inflight ?? 0, lastActivityMs: f.lastActivityMs, sandbox: {}, shells: { busy: async () => f.busy === true }, job: f.job === true,
  }) as unknown as LiveSandbox));
  const hibernated: string[] = [];
  const cap = new LiveCap({
    max, gate: new StartGate(4), log: Logger.silent(),
    lives: { all: () => [...live] },
    jobs: { activeIn: async (digest) => [...live].some((l) => l.digest === digest && (l as unknown as { job: boolean }).job) },
    hibernate: async (l, stillIdle) => {
      if (!live.has(l) || !(await stillIdle())) return false;
      live.delete(l);
      hibernated.push(l.record.key);
      return true;
    },
  });
  return { cap: { reserve: (key: string) => cap.reserve(key, waitMs) }, live, hibernated };
}

it('below the bound nothing goes; at it, the least recently used idle persistent sandbox hibernates', async () => {
  const { cap, hibernated } = setUp([{ key: 'old', lastActivityMs: 1 }, { key: 'new', lastActivityMs: 2 }], 3);
  const room = await cap.reserve('x');
  expect(hibernated).toEqual([]);
  // The reserved slot counts until it is released (the sandbox being brought up).
  await cap.reserve('y');
  expect(hibernated).toEqual(['old']);
  room();
});

it('never an ephemeral one, one with hibernation off, one running a command, a busy shell or a job', async () => {
  const { cap, hibernated } = setUp([
    { key: 'ephemeral', ephemeral: true, lastActivityMs: 1 },
    { key: 'off', hibernateMs: 0, lastActivityMs: 2 },
    { key: 'running', inflight: 1, lastActivityMs: 3 },
    { key: 'busy', busy: true, lastActivityMs: 4 },
    { key: 'job', job: true, lastActivityMs: 5 },
    { key: 'idle', lastActivityMs: 6 },
  ], 6);
  await cap.reserve('x');
  expect(hibernated).toEqual(['idle']);
});

it('with none that can go, a call waits for one that can, then is refused naming the bound and the fix', async () => {
  const { cap, hibernated, live } = setUp([{ key: 'a', inflight: 1, lastActivityMs: 1 }], 1, 5_000);
  const waiting = cap.reserve('x');
  await new Promise((r) => setTimeout(r, 120));
  expect(hibernated).toEqual([]);
  // Its command ends: it can go now, and the waiting call gets its room.
  for (const l of live) l.inflight = 0;
  await waiting;
  expect(hibernated).toEqual(['a']);

  const refused = setUp([{ key: 'b', inflight: 1, lastActivityMs: 1 }], 1, 150);
  const err = await refused.cap.reserve('session:x').catch((e: unknown) => e);
  expect(err).toBeInstanceOf(BerthError);
  expect((err as BerthError).code).toBe('at_capacity');
  expect((err as Error).message).toMatch(/sandbox "session:x" cannot start: this berth keeps 1 sandboxes live at once \(limits\.liveSandboxes\), and within 0 s \(the call's exec\.timeoutSeconds\) no room was made.*raise limits\.liveSandboxes/);
  expect(refused.hibernated).toEqual([]);
});

it('calls at once each hibernate a different sandbox, and take exactly the room made', async () => {
  const { cap, hibernated, live } = setUp(Array.from({ length: 5 }, (_, i) => ({ key: `s${i}`, lastActivityMs: i })), 5);
  const rooms = await Promise.all(['x', 'y', 'z'].map((k) => cap.reserve(k)));
  expect(hibernated.sort()).toEqual(['s0', 's1', 's2']);
  expect(live.size).toBe(2);
  for (const r of rooms) r();
});
