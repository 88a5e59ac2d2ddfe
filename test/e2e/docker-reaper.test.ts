import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { expect, it } from 'vitest';
import { ownerToken } from '../../src/kit/process-owner.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { REPO } from '../helpers/cli.js';
import {
  containerFor,
  containerState,
  describeContainers,
  describeDocker,
  dockerConfig,
  IMAGE,
  installs,
  waitFor,
  type TestInstall,
  dockerSuiteHooks,
} from '../helpers/docker-e2e.js';

/*
 * Reapers and installations against the real engine: a berth process killed with SIGKILL,
 * records that vanished, two installations on one engine, and the idle reaper.
 */

const reg = installs('berth-dreap-');

/** A berth library process (compiled dist/) holding two ephemeral sessions and the persistent default sandbox. */
const HOLDER = `
import { Broker, parseConfig } from ${JSON.stringify(pathToFileURL(join(REPO, 'dist', 'index.js')).href)};
const [berthHome, image] = process.argv.slice(2);
const broker = await Broker.open({
  config: parseConfig({ backend: 'docker', persistent: false, docker: { image } }),
  berthHome, env: { PATH: process.env.PATH },
});
for (const session of ['k1', 'k2']) {
  const r = await broker.exec({ session }, 'echo ' + session + ' > /workspace/f');
  if (r.exitCode !== 0) throw new Error(r.output);
}
const p = await broker.exec({}, 'echo persist > /workspace/p');
if (p.exitCode !== 0) throw new Error(p.output);
process.stdout.write('ready\\n');
setInterval(() => {}, 1000);
`;

/** Spawns the holder, waits for "ready", then kills it with SIGKILL and waits for it to be gone. */
async function runAndKillHolder(t: TestInstall): Promise<void> {
  const script = join(t.root, 'holder.mjs');
  writeFileSync(script, HOLDER);
  const child = spawn(process.execPath, [script, t.home, IMAGE], { env: t.env, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let out = '';
  let err = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`holder not ready within 30 s; stdout ${out} stderr ${err}`)), 30_000);
      child.stdout.setEncoding('utf8').on('data', (d: string) => {
        out += d;
        if (out.includes('ready\n')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`holder exited with ${code} before ready: ${err}`));
      });
    });
  } finally {
    child.kill('SIGKILL');
    await exited;
  }
}

describeDocker('reapers and installations on the real docker engine', () => {
  dockerSuiteHooks(reg);

  it('a berth process killed with SIGKILL: the next one reaps its ephemeral containers and keeps the persistent one', async () => {
    const t = reg.track();
    await runAndKillHolder(t);
    const held = await t.containers();
    expect(held.map((c) => c.labels['berth.key']).sort(), describeContainers(held)).toEqual(['default', 'session:k1', 'session:k2']);
    expect(held.every((c) => c.state === 'running'), describeContainers(held)).toBe(true);

    const b = await t.open(dockerConfig({ persistent: false }));
    const removed = await b.reapers.reapOrphans();
    expect(removed, describeContainers(held)).toHaveLength(2);
    const left = await t.containers();
    expect(left.map((c) => c.labels['berth.key']), describeContainers(left)).toEqual(['default']);
    expect(left[0]!.state).toBe('running');
    for (const c of held.filter((h) => h.labels['berth.key'] !== 'default')) {
      expect(await containerState(c.id), `container ${c.id.slice(0, 12)} should be gone`).toBeUndefined();
    }
    // The persistent sandbox's dir, and its disk image where berth can make one (root).
    expect(readdirSync(join(t.home, 'sandboxes', 'docker')).filter((n) => n !== '.disks' && n !== '.stdio')).toEqual(['default']);
    if (process.getuid?.() === 0) expect(readdirSync(join(t.home, 'sandboxes', 'docker', '.disks'))).toEqual(['default.ext4']);
    // The reaped containers' stdio dirs went with them (this process never handed them out: their
    // labels were asked of the engine); the kept one's stays.
    expect(readdirSync(join(t.home, 'sandboxes', 'docker', '.stdio'))).toEqual([left[0]!.labels['berth.stdio']]);
    expect(b.list('local').map((s) => s.sandboxKey)).toEqual(['default']);
    const p = await b.exec({}, 'cat /workspace/p');
    expect(p).toMatchObject({ exitCode: 0, stdout: 'persist\n' });
    expect(p.sandboxRecreated).toBeUndefined();
    // A session whose sandbox the reaper took while it was open hears so on its first result, once; a new session does not.
    const back = await b.exec({ session: 'k1' }, 'cat /workspace/f');
    expect(back).toMatchObject({ exitCode: 1, sandboxRecreated: true });
    expect((await b.exec({ session: 'k1' }, 'true')).sandboxRecreated).toBeUndefined();
    expect((await b.exec({ session: 'k3' }, 'true')).sandboxRecreated).toBeUndefined();
  }, 90_000);

  it('a container whose store record was deleted is reaped; another installation\'s container never is', async () => {
    const mine = reg.track();
    const theirs = reg.track();
    for (const t of [mine, theirs]) {
      // Detached sessions (as the CLI opens them): closing the broker leaves the containers running.
      const b = await t.open(dockerConfig({ persistent: false }), { holdSessions: false });
      await b.exec({ session: 'lost' }, 'true');
      await b.close();
    }
    const lost = await containerFor(mine.installation, 'session:lost');
    const foreign = await containerFor(theirs.installation, 'session:lost');
    // Both installations forget their record: to either reaper, its own container is now an orphan.
    for (const t of [mine, theirs]) {
      const store = StateStore.open(t.home);
      try {
        for (const r of store.sandboxes.list()) store.sandboxes.delete(r.digest);
      } finally {
        store.close();
      }
    }
    const b = await mine.open(dockerConfig({ persistent: false }));
    const removed = await b.reapers.reapOrphans();
    expect(removed, `mine ${lost.id.slice(0, 12)}, theirs ${foreign.id.slice(0, 12)}`).toEqual([lost.name]);
    expect(await containerState(lost.id)).toBeUndefined();
    expect((await containerState(foreign.id))?.running, `container ${foreign.id.slice(0, 12)} of the other installation`).toBe(true);
    // A docker call (its start-up reap) leaves the other installation alone too.
    expect((await b.exec({ session: 'x' }, 'true')).exitCode).toBe(0);
    expect((await containerState(foreign.id))?.running).toBe(true);
    // Its own reaper does take it: it was a real orphan, just not ours.
    const other = await theirs.open(dockerConfig({ persistent: false }));
    expect(await other.reapers.reapOrphans()).toEqual([foreign.name]);
  });

  it('a process that died while creating an ephemeral sandbox (container made, ref not yet recorded) is reaped at once; a live creator\'s claim is left alone', async () => {
    const t = reg.track();
    // Detached sessions (as the CLI opens them): closing the broker leaves the containers running.
    const b = await t.open(dockerConfig({ persistent: false }), { holdSessions: false });
    for (const session of ['dead', 'alive']) await b.exec({ session }, 'true');
    await b.close();
    const dead = await containerFor(t.installation, 'session:dead');
    const alive = await containerFor(t.installation, 'session:alive');
    // Rewind both records to "claimed, container not recorded yet": one by a process that is gone
    // (pid 2^22 + 1 cannot exist), one by this live test process.
    const store = StateStore.open(t.home);
    try {
      for (const r of store.sandboxes.list()) {
        const owner = r.key === 'session:dead' ? '4194305:1' : ownerToken();
        store.sandboxes.delete(r.digest);
        expect(store.sandboxes.claim({ ...r, ref: '', createdMs: Date.now(), claimOwner: owner })).toBe('claimed');
      }
    } finally {
      store.close();
    }
    const next = await t.open(dockerConfig({ persistent: false }));
    const removed = await next.reapers.reapOrphans();
    expect(removed, describeContainers(await t.containers())).toEqual([dead.name]);
    expect(await containerState(dead.id)).toBeUndefined();
    expect((await containerState(alive.id))?.running).toBe(true);
  });

  it('two installations with the same keys get different containers; one\'s close and reaper leave the other alone', async () => {
    const a = reg.track();
    const z = reg.track();
    const ba = await a.open(dockerConfig({ persistent: false }));
    const bz = await z.open(dockerConfig({ persistent: false }));
    for (const [b, who] of [[ba, 'a'], [bz, 'z']] as const) {
      expect((await b.exec({ session: 's' }, `echo ${who} > /workspace/who`)).exitCode).toBe(0);
      expect((await b.exec({}, `echo ${who} > /workspace/who`)).exitCode).toBe(0);
    }
    for (const key of ['session:s', 'default']) {
      const ca = await containerFor(a.installation, key);
      const cz = await containerFor(z.installation, key);
      expect(ca.name).not.toBe(cz.name);
      expect(ca.labels['berth.identity']).not.toBe(cz.labels['berth.identity']);
      expect(ca.labels['berth.installation']).not.toBe(cz.labels['berth.installation']);
    }
    expect((await ba.exec({ session: 's' }, 'cat /workspace/who')).stdout).toBe('a\n');
    expect((await bz.exec({ session: 's' }, 'cat /workspace/who')).stdout).toBe('z\n');
    expect((await bz.exec({}, 'cat /workspace/who')).stdout).toBe('z\n');

    const zBefore = await z.containers();
    await ba.closeSession({ session: 's' });
    await ba.reapers.reapOrphans();
    await ba.close();
    const zAfter = await z.containers();
    expect(zAfter.map((c) => `${c.id} ${c.state}`).sort(), describeContainers(zAfter)).toEqual(zBefore.map((c) => `${c.id} running`).sort());
    expect((await bz.exec({ session: 's' }, 'cat /workspace/who')).stdout).toBe('z\n');
    expect((await a.containers()).map((c) => c.labels['berth.key'])).toEqual(['default']);
  });

  it('idle reaper: ephemeral removed, persistent hibernated then resumed with its files, a background job keeps its sandbox', async () => {
    const t = reg.track();
    // idleSeconds 10 (the minimum) makes the broker sweep every 2.5 s.
    const b = await t.open(dockerConfig({ persistent: false, lifecycle: { idleSeconds: 10, hibernateSeconds: 10 } }));
    // The busy session goes first, so it is idle-eligible before the others are swept.
    const busy = await b.exec({ session: 'busy' }, 'sleep 30 > /dev/null 2>&1 &');
    expect(busy.exitCode).toBe(0);
    await b.exec({ session: 'idle' }, 'true');
    await b.exec({}, 'echo kept > /workspace/keep');
    const idle = await containerFor(t.installation, 'session:idle');
    const dflt = await containerFor(t.installation, 'default');
    const bg = await containerFor(t.installation, 'session:busy');
    const ids = `idle ${idle.id.slice(0, 12)}, default ${dflt.id.slice(0, 12)}, busy ${bg.id.slice(0, 12)}`;

    const swept = await waitFor(async () => (await containerState(idle.id)) === undefined
      && (await containerState(dflt.id))?.running === false, 20_000, 500);
    expect(swept, `${ids}: ${describeContainers(await t.containers())}`).toBe(true);
    expect(await containerState(dflt.id), ids).toMatchObject({ running: false });
    expect((await containerState(bg.id))?.running, `${ids}: the background job's sandbox`).toBe(true);
    expect(existsSync(join(t.home, 'sandboxes', 'docker', 'default', 'workspace', 'keep'))).toBe(true);

    const again = await b.exec({}, 'cat /workspace/keep');
    expect(again, ids).toMatchObject({ exitCode: 0, stdout: 'kept\n' });
    expect(again.sandboxRecreated).toBeUndefined();
    expect(again.sandboxResumed?.restored).toContain('files');
    expect((await containerState(dflt.id))?.running, ids).toBe(true);
    expect(readFileSync(join(t.home, 'sandboxes', 'docker', 'default', 'workspace', 'keep'), 'utf8')).toBe('kept\n');
    const stillBusy = await b.exec({ session: 'busy' }, 'jobs | wc -l');
    expect(stillBusy.stdout.trim(), ids).toBe('1');
  }, 60_000);

  it('the sweep prunes the holder rows of a process that ended without letting go; a live holder\'s row stays', async () => {
    const t = reg.track();
    // idleSeconds 10 (the minimum) makes the broker sweep every 2.5 s; the sandbox is persistent and never hibernates.
    const b = await t.open(dockerConfig({ persistent: true, lifecycle: { idleSeconds: 10, hibernateSeconds: 0 } }));
    expect((await b.exec({}, 'true')).exitCode).toBe(0);
    const store = StateStore.open(t.home);
    try {
      const [rec] = store.sandboxes.list();
      // pid 2^22 + 1 cannot exist: a berth that was killed while it held the sandbox.
      const dead = '4194305:1';
      store.sandboxes.hold(rec!.digest, dead);
      expect(store.sandboxes.holders(rec!.digest)).toEqual(expect.arrayContaining([dead, ownerToken()]));
      expect(await waitFor(async () => !store.sandboxes.holders(rec!.digest).includes(dead), 20_000, 250)).toBe(true);
      expect(store.sandboxes.holders(rec!.digest)).toEqual([ownerToken()]);
    } finally {
      store.close();
    }
  }, 40_000);
});
