import { randomBytes, randomInt } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Backend, Sandbox, SandboxSpec } from '../../src/backends/backend.js';
import type { BackendCatalog } from '../../src/backends/catalog.js';
import { Broker, type BrokerOptions } from '../../src/broker/broker.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { sectionOf } from '../../src/backends/module.js';
import { BerthError } from '../../src/errors.js';
import { Logger } from '../../src/logging/logger.js';
import { pidsWithArg, waitExactArgv, waitNoneWithArg, waitSomeWithArg } from '../helpers/processes.js';
import { filesConformance } from './files-conformance.js';
import { SNAPSHOT_TESTS, snapshotConformance } from './snapshot-conformance.js';

/*
 * One suite, run against every backend (local, docker, and the fake one the broker's own tests
 * use), as one router suite runs against every router: what a backend must do for berth to keep
 * its promises. What a backend does not do is written down as a skip with its reason, and shows
 * as a skip.
 */

/** One backend's engine for one test: where its installations live and how to reach behind berth's back. */
export interface ConformanceTarget {
  /** The backend's module name, as configs write it. */
  name: string;
  /** The modules configs are parsed against (the registry's, plus a test's own). */
  catalog: BackendCatalog;
  /** What every config of the suite starts from (an image, say). */
  config: Record<string, unknown>;
  /** A fresh installation (its own BERTH_HOME) on this engine; cleaned up with the target. */
  newHome(): string;
  /** Removes a sandbox behind berth's back (as `docker rm -f` would). */
  removeOutOfBand(ref: string): Promise<void>;
  /** Removes what the target's installations left (sandboxes, networks, dirs). */
  cleanup(): Promise<void>;
  /** Damages a snapshot behind berth's back; returns what `verify` must name (see snapshot-conformance.ts). */
  damageSnapshot?(ref: string): Promise<string>;
  /** Removes one file of a snapshot's copied files behind berth's back; returns what `verify` must name (see snapshot-conformance.ts). */
  damageSnapshotPartly?(ref: string): Promise<string>;
  /** The installation's snapshot objects the engine still holds (images), tagged or not. */
  leftoverSnapshots?(home: string): Promise<string[]>;
}

export interface ConformanceOptions {
  name: string;
  /** A fresh target, for each test. */
  newBackend: () => Promise<ConformanceTarget>;
  /** Tests this backend does not pass, by name, with why. */
  skip?: { reason: string; tests: string[] }[];
}

/** The tests of the suite by name, so a skip list is checked against them. */
export const CONFORMANCE_TESTS = {
  adopt: 'a second process adopts a persistent sandbox by its identity: the same sandbox, not recreated',
  ephemeralRef: 'an ephemeral sandbox is found again only by its recorded ref; without it a new one is created',
  labels: 'identity labels: the engine lists this installation\'s sandboxes with digest and lifecycle, never another installation\'s',
  removeIdempotent: 'remove is idempotent and takes the sandbox\'s files with it',
  outOfBand: 'a sandbox removed out of band is recreated once, and the result says so',
  envNotOnArgv: 'spawn: env values reach the process but never any argv, seen from inside',
  killTree: 'spawn: kill ends the process and what it started',
  shellState: 'the persistent shell keeps cwd, exported variables, functions and aliases across commands and a replacement',
  restartState: 'a persistent sandbox\'s session starts again where it was after its berth stopped: cwd and exported variables',
  hibernate: 'an idle persistent sandbox hibernates, and the next call resumes it with its files, cwd and exported variables, saying so',
  timeoutTree: 'a timeout ends the command line: nothing more of it runs and none of its processes is left',
  outputCaps: 'output over exec.maxOutputChars keeps a head and a tail; a helper past its byte cap is stopped',
  jobs: 'jobs: start, read, kill; a killed job leaves no process',
  jobsDie: 'removing a sandbox leaves none of its jobs running',
  reapDead: 'reaper: an ephemeral sandbox whose session a dead process held is removed; a persistent one is kept',
  reapLost: 'reaper: a sandbox whose record is lost is removed; another installation\'s never is',
  ...SNAPSHOT_TESTS,
} as const;

/** `sleep <marker>`: a process a test can find on the host by its argument. */
function marker(): string {
  return String(randomInt(1_000_000, 9_000_000));
}

export function runBackendConformance(o: ConformanceOptions): void {
  const known = new Set<string>(Object.values(CONFORMANCE_TESTS));
  for (const s of o.skip ?? []) {
    for (const t of s.tests) if (!known.has(t)) throw new Error(`conformance skip for ${o.name} names no test: "${t}"`);
  }

  describe(`backend conformance: ${o.name}`, () => {
    let target: ConformanceTarget | undefined;
    const brokers: Broker[] = [];
    const backends: Backend[] = [];

    beforeEach(async () => {
      target = await o.newBackend();
    });
    afterEach(async () => {
      for (const b of brokers.splice(0)) await b.close({ graceMs: 2_000 }).catch(() => undefined);
      for (const b of backends.splice(0)) await b.close().catch(() => undefined);
      await target?.cleanup();
      target = undefined;
    }, 120_000);

    const t = (): ConformanceTarget => {
      if (target === undefined) throw new Error('no conformance target');
      return target;
    };

    /** A test of the suite, or its written skip. */
    const test = (name: string, fn: () => Promise<void>, timeoutMs = 90_000): void => {
      const skip = o.skip?.find((s) => s.tests.includes(name));
      if (skip !== undefined) it.skip(`${name} (skipped on ${o.name}: ${skip.reason})`, fn);
      else it(name, fn, timeoutMs);
    };

    const configOf = (extra: Record<string, unknown> = {}) =>
      parseConfig({ backend: t().name, ...t().config, ...extra }, undefined, { backends: t().catalog });

    const openOn = async (home: string, extra: Record<string, unknown> = {}, opts: Omit<BrokerOptions, 'config' | 'berthHome'> = {}): Promise<Broker> => {
      const broker = await Broker.open({ config: configOf(extra), berthHome: home, env: { PATH: process.env['PATH'] }, ...opts });
      brokers.push(broker);
      return broker;
    };

    const installationOf = (home: string): string => {
      const store = StateStore.open(home);
      try {
        return store.installationId;
      } finally {
        store.close();
      }
    };

    /** The backend as one more process of the installation at `home` would create it. */
    const backendOn = async (home: string): Promise<Backend> => {
      const config = configOf();
      const module = t().catalog.module(t().name);
      const places = [config.base, ...Object.values(config.profiles)].filter((p) => p.backend === module.name).map((p) => sectionOf(module, p));
      const backend = await module.create({
        berthHome: home, installation: installationOf(home), log: Logger.silent(), lease: (_name, fn) => fn(), places,
      });
      backends.push(backend);
      return backend;
    };

    const specOn = (home: string, key: string, ephemeral: boolean): SandboxSpec => {
      const digest = randomBytes(32).toString('hex');
      const section = sectionOf(t().catalog.module(t().name), configOf().base);
      return {
        identity: { installation: installationOf(home), tenant: 'local', profile: 'default', key },
        digest, dirName: `conf-${digest.slice(0, 12)}`, ephemeral, mount: null, rule: 'auto:5', section,
      };
    };

    const sh = async (sandbox: Sandbox, script: string): Promise<string> => {
      const r = await sandbox.execOnce(['sh', '-c', script]);
      expect(r.exitCode, `${script}: ${r.stderr.toString()}`).toBe(0);
      return r.stdout.toString('utf8');
    };

    const refOf = (home: string, key: string): string => {
      const store = StateStore.open(home);
      try {
        const rec = store.sandboxes.list().find((r) => r.key === key);
        if (rec === undefined) throw new Error(`no record of ${key}`);
        return rec.ref;
      } finally {
        store.close();
      }
    };

    // -- lifecycle -------------------------------------------------------------------------

    test(CONFORMANCE_TESTS.adopt, async () => {
      const home = t().newHome();
      const [a, b] = [await backendOn(home), await backendOn(home)];
      const spec = specOn(home, 'conf-persist', false);
      const first = await a.ensure(spec, undefined);
      await sh(first, `echo here > ${first.defaultCwd}/adopt.txt`);
      const again = await b.ensure(spec, undefined);
      expect([again.ref, again.recreated]).toEqual([first.ref, false]);
      expect(await sh(again, `cat ${again.defaultCwd}/adopt.txt`)).toBe('here\n');
      const known = await b.ensure(spec, first.ref);
      expect([known.ref, known.recreated]).toEqual([first.ref, false]);
    });

    test(CONFORMANCE_TESTS.ephemeralRef, async () => {
      const home = t().newHome();
      const [a, b] = [await backendOn(home), await backendOn(home)];
      const spec = specOn(home, 'session:conf-eph', true);
      const first = await a.ensure(spec, undefined);
      const reattached = await b.ensure(spec, first.ref);
      expect([reattached.ref, reattached.recreated]).toEqual([first.ref, false]);
      const other = await b.ensure(spec, undefined);
      expect(other.ref).not.toBe(first.ref);
    });

    test(CONFORMANCE_TESTS.labels, async () => {
      const [home, otherHome] = [t().newHome(), t().newHome()];
      const [mine, theirs] = [await backendOn(home), await backendOn(otherHome)];
      const pSpec = specOn(home, 'conf-p', false);
      const eSpec = specOn(home, 'session:conf-e', true);
      const p = await mine.ensure(pSpec, undefined);
      const e = await mine.ensure(eSpec, undefined);
      const x = await theirs.ensure(specOn(otherHome, 'conf-p', false), undefined);
      const listed = await mine.listManaged();
      expect(listed.find((m) => m.ref === p.ref)).toMatchObject({ digest: pSpec.digest, ephemeral: false, running: true });
      expect(listed.find((m) => m.ref === e.ref)).toMatchObject({ digest: eSpec.digest, ephemeral: true, running: true });
      expect(listed.map((m) => m.ref)).not.toContain(x.ref);
    });

    test(CONFORMANCE_TESTS.removeIdempotent, async () => {
      const home = t().newHome();
      const a = await backendOn(home);
      const spec = specOn(home, 'conf-rm', false);
      const s = await a.ensure(spec, undefined);
      await sh(s, `echo gone-soon > ${s.defaultCwd}/f.txt`);
      await a.remove(s.ref, s.hostDir);
      await a.remove(s.ref, s.hostDir);
      if (s.hostDir !== undefined) expect(existsSync(s.hostDir)).toBe(false);
      const fresh = await a.ensure(spec, undefined);
      expect(await sh(fresh, `cat ${fresh.defaultCwd}/f.txt 2>/dev/null || echo none`)).toBe('none\n');
    });

    test(CONFORMANCE_TESTS.outOfBand, async () => {
      const home = t().newHome();
      const broker = await openOn(home, { persistent: false });
      const s = { session: 'oob' };
      expect((await broker.exec(s, 'echo one > f')).exitCode).toBe(0);
      await t().removeOutOfBand(refOf(home, broker.explain(s).sandboxKey));
      const r = await broker.exec(s, 'cat f 2>/dev/null || echo fresh');
      expect(r).toMatchObject({ exitCode: 0, stdout: 'fresh\n', sandboxRecreated: true });
      const next = await broker.exec(s, 'true');
      expect(next.sandboxRecreated).toBeUndefined();
    });

    // -- spawn -----------------------------------------------------------------------------

    test(CONFORMANCE_TESTS.envNotOnArgv, async () => {
      const home = t().newHome();
      const sandbox = await (await backendOn(home)).ensure(specOn(home, 'session:conf-env', true), undefined);
      const secret = `conf-secret-${randomBytes(8).toString('hex')}`;
      const m = marker();
      const p = await sandbox.spawn(['sleep', m], { env: { CONF_SECRET: secret }, stdin: false });
      try {
        // The process itself, not a wrapper on its way to exec it (which has the same arguments).
        const [pid] = await waitExactArgv(['sleep', m]);
        expect(pid, `sleep ${m} in ${sandbox.name}`).toBeDefined();
        // Delivered: in the process's own environment.
        expect(readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0')).toContain(`CONF_SECRET=${secret}`);
        // Never on an argv: none of the sandbox's processes shows it, and neither does any host process.
        const inside = await sh(sandbox, 'for f in /proc/[0-9]*/cmdline; do tr "\\000" " " < "$f" 2>/dev/null; echo; done');
        expect(inside).toContain(`sleep ${m}`);
        expect(inside).not.toContain(secret);
        expect(pidsWithArg(secret)).toEqual([]);
      } finally {
        await p.kill();
      }
      expect(await waitNoneWithArg(m)).toEqual([]);
    });

    test(CONFORMANCE_TESTS.killTree, async () => {
      const home = t().newHome();
      const sandbox = await (await backendOn(home)).ensure(specOn(home, 'session:conf-kill', true), undefined);
      const [m1, m2] = [marker(), marker()];
      const p = await sandbox.spawn(['sh', '-c', `sleep ${m1} & sleep ${m2}`], { env: {}, stdin: false });
      expect((await waitSomeWithArg(m1)).length + (await waitSomeWithArg(m2)).length).toBe(2);
      await p.kill();
      expect(await waitNoneWithArg(m1)).toEqual([]);
      expect(await waitNoneWithArg(m2)).toEqual([]);
      await p.kill(); // idempotent
    });

    // -- the persistent shell --------------------------------------------------------------

    test(CONFORMANCE_TESTS.shellState, async () => {
      const broker = await openOn(t().newHome(), { persistent: false });
      const s = { session: 'state' };
      const set = await broker.exec(s, 'mkdir -p sub && cd sub && export KEEP=kept && kf(){ echo kf-ok; } && alias ka="echo ka-ok"');
      expect(set.exitCode, set.output).toBe(0);
      const kept = await broker.exec(s, 'pwd; echo "$KEEP"; kf; alias ka');
      expect(kept.stdout).toMatch(/\/sub\nkept\nkf-ok\nalias ka='echo ka-ok'\n$/);
      const timedOut = await broker.exec(s, 'sleep 30', { timeoutSeconds: 1 });
      expect(timedOut).toMatchObject({ exitCode: 124, timedOut: true, shellReplaced: true });
      const after = await broker.exec(s, 'pwd; echo "$KEEP"; kf; alias ka');
      expect(after.stdout).toBe(kept.stdout);
      expect(after.cwd).toBe(kept.cwd);
    });

    test(CONFORMANCE_TESTS.restartState, async () => {
      const home = t().newHome();
      const first = await openOn(home, { persistent: true });
      const s = { session: 'restart' };
      const set = await first.exec(s, 'mkdir -p sub && cd sub && export KEEP=kept && pwd');
      expect(set.exitCode, set.output).toBe(0);
      // A berth that stops closes its sessions (no cwd record is left) and keeps the sandbox.
      await first.close();
      const next = await openOn(home, { persistent: true });
      const again = await next.exec(s, 'pwd; echo "$KEEP"');
      expect(again.stdout).toBe(`${set.stdout}kept\n`);
      expect(again.cwd).toBe(set.cwd);
      await next.removeSandboxOf(s);
    });

    test(CONFORMANCE_TESTS.hibernate, async () => {
      // 10 s is the shortest hibernateSeconds; the session stays open (idleSeconds) across it.
      const broker = await openOn(t().newHome(), { persistent: true, scope: 'session', lifecycle: { idleSeconds: 3600, hibernateSeconds: 10 } });
      const s = { session: 'sleepy' };
      const set = await broker.exec(s, 'mkdir -p sub && cd sub && export KEEP=kept && echo data > file && pwd');
      expect(set.exitCode, set.output).toBe(0);
      const state = async (): Promise<string | undefined> => (await broker.listWithState('local')).find((x) => x.sandboxKey === 'session:sleepy')?.state;
      for (const deadline = Date.now() + 60_000; (await state()) !== 'hibernated' && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 500));
      expect(await state()).toBe('hibernated');
      const back = await broker.exec(s, 'pwd; echo "$KEEP"; cat file');
      expect(back.stdout).toBe(`${set.stdout}kept\ndata\n`);
      expect(back.sandboxResumed?.restored).toEqual(expect.arrayContaining(['files', 'cwd', 'exported variables']));
      expect(await state()).not.toBe('hibernated');
      expect((await broker.exec(s, 'true')).sandboxResumed).toBeUndefined();
      await broker.removeSandboxOf(s);
    }, 120_000);

    test(CONFORMANCE_TESTS.timeoutTree, async () => {
      const broker = await openOn(t().newHome(), { persistent: false });
      const s = { session: 'timeout' };
      const [m1, m2] = [marker(), marker()];
      const r = await broker.exec(s, `sleep ${m1} & sleep ${m2}; touch after-timeout`, { timeoutSeconds: 1 });
      expect(r).toMatchObject({ exitCode: 124, timedOut: true });
      // The tree is gone when the call returns.
      expect([...pidsWithArg(m1), ...pidsWithArg(m2)]).toEqual([]);
      await new Promise((resolve) => setTimeout(resolve, 500));
      const check = await broker.exec(s, 'test -e after-timeout && echo ran || echo not-run');
      expect(check.stdout).toBe('not-run\n');
    });

    test(CONFORMANCE_TESTS.outputCaps, async () => {
      const home = t().newHome();
      const broker = await openOn(home, { persistent: false, exec: { maxOutputChars: 1000 } });
      const r = await broker.exec({ session: 'caps' }, 'i=0; while [ $i -lt 500 ]; do echo "line-$i"; i=$((i + 1)); done');
      expect(r.truncated).toBe(true);
      expect(r.stdout.length).toBeLessThan(1200);
      expect(r.stdout).toMatch(/^line-0\n/);
      expect(r.stdout).toMatch(/line-499\n$/);
      const sandbox = await (await backendOn(home)).ensure(specOn(home, 'session:conf-cap', true), undefined);
      const err = await sandbox.execOnce(['sh', '-c', 'i=0; while [ $i -lt 400 ]; do echo 0123456789; i=$((i + 1)); done'], { maxOutputBytes: 1000 })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BerthError);
      expect((err as BerthError).code).toBe('helper_output_too_large');
    });

    // -- jobs ------------------------------------------------------------------------------

    test(CONFORMANCE_TESTS.jobs, async () => {
      const broker = await openOn(t().newHome(), { persistent: false });
      const s = { session: 'jobs' };
      const m = marker();
      const { jobId } = await broker.jobs.start(s, `echo first; echo second; sleep ${m}`);
      let out = '';
      for (let i = 0; i < 100 && !out.includes('second\n'); i++) {
        out += (await broker.jobs.read(s, jobId, { offset: out.length })).output;
        if (!out.includes('second\n')) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(out).toBe('first\nsecond\n');
      expect(await waitSomeWithArg(m)).toHaveLength(1);
      expect(await broker.jobs.kill(s, jobId)).toEqual({ killed: true });
      expect(await waitNoneWithArg(m)).toEqual([]);
      expect((await broker.jobs.read(s, jobId)).status).toBe('killed');
    });

    test(CONFORMANCE_TESTS.jobsDie, async () => {
      const broker = await openOn(t().newHome(), { persistent: false });
      const s = { session: 'jobs-die' };
      const m = marker();
      await broker.jobs.start(s, `sleep ${m}`);
      expect(await waitSomeWithArg(m)).toHaveLength(1);
      expect(await broker.removeSandboxOf(s)).toBe(true);
      expect(await waitNoneWithArg(m)).toEqual([]);
    });

    // -- reapers ---------------------------------------------------------------------------

    test(CONFORMANCE_TESTS.reapDead, async () => {
      const home = t().newHome();
      const first = await openOn(home, { persistent: false }, { holdSessions: false });
      expect((await first.exec({ session: 'dead' }, 'true')).exitCode).toBe(0);
      expect((await first.exec({}, 'echo kept > p')).exitCode).toBe(0);
      const dead = first.list('local').find((x) => x.sandboxKey === 'session:dead')!;
      await first.close();
      // The session as a berth process that died while holding it leaves it: owned by a pid that is gone.
      const store = StateStore.open(home);
      const digest = store.sandboxes.list().find((r) => r.key === 'session:dead')!.digest;
      store.sessions.open('local', 'default', 'dead', digest, '2147483646:1', Date.now());
      store.close();

      const next = await openOn(home, { persistent: false });
      expect(await next.reapers.reapOrphans()).toEqual([dead.name]);
      expect(next.list('local').map((x) => x.sandboxKey)).toEqual(['default']);
      expect((await next.exec({}, 'cat p')).stdout).toBe('kept\n');
    });

    test(CONFORMANCE_TESTS.reapLost, async () => {
      const [home, otherHome] = [t().newHome(), t().newHome()];
      for (const h of [home, otherHome]) {
        const b = await openOn(h, { persistent: false }, { holdSessions: false });
        expect((await b.exec({ session: 'lost' }, 'true')).exitCode).toBe(0);
        await b.close();
      }
      const refs = [refOf(home, 'session:lost'), refOf(otherHome, 'session:lost')];
      for (const h of [home, otherHome]) {
        const store = StateStore.open(h);
        for (const r of store.sandboxes.list()) store.sandboxes.delete(r.digest);
        store.close();
      }
      const mine = await openOn(home, { persistent: false });
      expect(await mine.reapers.reapOrphans()).toHaveLength(1);
      const [mineAfter, theirsAfter] = [await backendOn(home), await backendOn(otherHome)];
      expect((await mineAfter.listManaged()).map((m) => m.ref)).not.toContain(refs[0]);
      expect((await theirsAfter.listManaged()).map((m) => m.ref)).toContain(refs[1]);
    });

    // -- snapshots -------------------------------------------------------------------------

    snapshotConformance(test, () => ({
      newHome: () => t().newHome(),
      backendOn,
      specOn,
      sh,
      damageSnapshot: t().damageSnapshot,
      damageSnapshotPartly: t().damageSnapshotPartly,
      leftoverSnapshots: t().leftoverSnapshots,
    }));

    // -- files -----------------------------------------------------------------------------

    filesConformance(o.name, async (extra = {}) => {
      const home = t().newHome();
      return { broker: await openOn(home, { persistent: false, ...extra }), home };
    }, (line) => console.log(line));
  });
}
