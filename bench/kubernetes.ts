import { randomBytes } from 'node:crypto';
import { defaultDocker } from '../src/backends/docker/engine.js';
import { execOnceInPod } from '../src/backends/kubernetes/exec-once.js';
import { spawnInPod, type ExecTarget } from '../src/backends/kubernetes/exec-stream.js';
import { CONTAINER_NAME, sandboxPod, STATE_DIR, WORKSPACE } from '../src/backends/kubernetes/manifests.js';
import { createEphemeralPod, deletePod, waitForPodGone, waitForRunning } from '../src/backends/kubernetes/pods.js';
import { PersistentShell } from '../src/shell/persistent-shell.js';
import { Broker } from '../src/broker/broker.js';
import { parseConfig } from '../src/config/schema.js';
import { BerthOnStandin } from '../test/k8s-standin/berth-on-standin.js';
import { sandboxInput } from '../test/k8s-standin/fixtures.js';
import { fmt, row, timeMany } from './stats.js';

/*
 * The kubernetes backend through the stand-in API server (test/k8s-standin/): the real client
 * and exec WebSocket, pods as local containers, so every figure is a lower bound for a cluster
 * (no network to the API server, no kubelet hop, no scheduling or image pulls).
 */

const IMAGE = process.env['BERTH_TEST_IMAGE'] ?? 'berth-sandbox:minimal';

/** `echo x` round trips on a bare bash over one exec WebSocket: a line in, a line out, no berth protocol. */
async function bareShellOverWebSocket(target: ExecTarget, n: number): Promise<number[]> {
  const p = await spawnInPod(target, ['bash', '--noprofile', '--norc'], { env: {}, stdin: 'pipe' });
  let buf = '';
  let waiter: (() => void) | undefined;
  p.stdout.on('data', (c: Buffer) => {
    buf += c.toString();
    if (buf.includes('x\n')) waiter?.();
  });
  const samples = await timeMany(n, () => new Promise<void>((resolve) => {
    buf = '';
    waiter = resolve;
    p.stdin.write('echo x\n');
  }));
  await p.kill();
  return samples;
}

/** The stand-in's own pod start: create the Pod, wait for Running, one exec; no berth. Removal (waited out) is not timed. */
async function podToFirstCommand(cluster: BerthOnStandin, rounds: number): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const input = sandboxInput('bench-k8s', { k: { image: IMAGE } });
    const t = process.hrtime.bigint();
    await createEphemeralPod(cluster.client, sandboxPod(input));
    await waitForRunning(cluster.client, input.name, 60_000);
    await execOnceInPod({ client: cluster.client, pod: input.name, container: CONTAINER_NAME }, ['true']);
    samples.push(Number(process.hrtime.bigint() - t) / 1e6);
    await deletePod(cluster.client, input.name);
    await waitForPodGone(cluster.client, input.name, 60_000);
  }
  return samples;
}

/** berth's persistent shell protocol alone (no broker: no policy, audit or store) over one exec WebSocket. */
async function shellProtocolOverWebSocket(target: ExecTarget, n: number): Promise<number[]> {
  const shell = await PersistentShell.start({
    open: (env) => spawnInPod(target, ['bash', '--noprofile', '--norc'], { env, cwd: WORKSPACE, stdin: 'pipe' }),
    execOnce: (argv, o) => execOnceInPod(target, argv, o),
    stateDir: STATE_DIR, shellId: `bench-${randomBytes(3).toString('hex')}`, defaultCwd: WORKSPACE, secretNames: [], spillDir: undefined, maxOutputChars: 100_000,
  });
  try {
    return await timeMany(n, () => shell.run('true', { timeoutMs: 10_000 }));
  } finally {
    await shell[Symbol.asyncDispose]();
  }
}

export async function kubernetesBench(n: number): Promise<void> {
  try {
    const docker = defaultDocker();
    await docker.ping();
    await docker.getImage(IMAGE).inspect();
  } catch (err) {
    console.log(`\n# kubernetes (stand-in): SKIPPED (${(err as Error).message}); the stand-in runs pods as docker containers: start dockerd and run "berth image build --variant minimal"`);
    return;
  }
  const cluster = await BerthOnStandin.start();
  const broker = await Broker.open({
    config: parseConfig({ backend: 'kubernetes', persistent: false, kubernetes: cluster.section({ image: IMAGE }) }),
    berthHome: cluster.newHome(), env: { PATH: process.env['PATH'] },
  });
  try {
    console.log('\n# kubernetes via the stand-in API server: trivial command, same pod (a lower bound for a cluster)');
    const session = broker.session({ session: 'bench' });
    await session.exec('true');
    const berth = row('berth kubernetes session exec (exec WS)', await timeMany(n, () => session.exec('true')));
    const pod = broker.list('local')[0]!.name;
    const target = { client: cluster.client, pod, container: CONTAINER_NAME };
    const protocol = row('berth shell protocol alone, own exec WS', await shellProtocolOverWebSocket(target, n));
    const bare = row('bare bash line round trip, own exec WS', await bareShellOverWebSocket(target, n));
    console.log(`  berth p50 / bare shell on the exec WS p50 = ${(berth.p50 / bare.p50).toFixed(2)}x   (target <= 1.3x); the shell protocol alone: ${(protocol.p50 / bare.p50).toFixed(2)}x`);

    console.log('\n# kubernetes via the stand-in: new sandbox to first command');
    const rounds = 10;
    const firsts: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const s = { session: `fresh-${randomBytes(4).toString('hex')}` };
      const t = process.hrtime.bigint();
      await broker.exec(s, 'true');
      firsts.push(Number(process.hrtime.bigint() - t) / 1e6);
      await broker.removeSandboxOf(s);
    }
    const fresh = row('berth: new session to its first exec (new pod)', firsts);
    const own = row('stand-in pod start: create, Running, exec', await podToFirstCommand(cluster, rounds));
    console.log(`  berth new sandbox p50 / stand-in pod start p50 = ${(fresh.p50 / own.p50).toFixed(2)}x (berth adds the NetworkPolicy, its own start-up poll and the shell: ${fmt(fresh.p50 - own.p50)})`);
  } finally {
    await broker.close();
    await cluster.stop();
  }
}
