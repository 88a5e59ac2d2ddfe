import { randomBytes } from 'node:crypto';
import { BENCH_IMAGE as IMAGE, dockerUnavailable } from './engine-check.js';
import { execOnceInPod } from '../src/backends/kubernetes/exec-once.js';
import { spawnInPod, type ExecTarget } from '../src/backends/kubernetes/spawn.js';
import { CONTAINER_NAME, sandboxPod, STATE_DIR, WORKSPACE } from '../src/backends/kubernetes/manifests.js';
import { createEphemeralPod, deletePod, waitForPodGone, waitForRunning } from '../src/backends/kubernetes/pods.js';
import { PersistentShell } from '../src/shell/persistent-shell.js';
import { Broker } from '../src/broker/broker.js';
import { parseConfig } from '../src/setup/parse-config.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { kubeClient, type KubeClient } from '../src/backends/kubernetes/kube-client.js';
import { sandboxInput } from '../test/k8s-standin/fixtures.js';
import { fmt, interleaved, row, verdict } from './stats.js';

/*
 * The kubernetes backend through the stand-in API server (test/k8s-standin/): the real client
 * and exec WebSocket, pods as local containers, so every figure is a lower bound for a cluster
 * (no network to the API server, no kubelet hop, no scheduling or image pulls).
 */


/**
 * A bare bash over one exec WebSocket, no berth protocol: `run` sends `true`, then a marker on
 * stdout (the floor), or on stderr and then stdout with both awaited (`bothStreams`: what keeping
 * the two streams apart costs on this transport).
 */
async function bareShellOverWebSocket(target: ExecTarget, bothStreams = false): Promise<{ run(): Promise<void>; close(): Promise<void> }> {
  const p = await spawnInPod(target, ['bash', '--noprofile', '--norc'], { env: {}, stdin: true });
  let out = '';
  let err = '';
  let waiter: { key: string; resolve: () => void } | undefined;
  const check = (): void => {
    if (waiter === undefined || !out.includes(waiter.key) || (bothStreams && !err.includes(waiter.key))) return;
    const w = waiter;
    waiter = undefined;
    w.resolve();
  };
  p.stdout.on('data', (c: Buffer) => {
    out += c.toString();
    check();
  });
  p.stderr.on('data', (c: Buffer) => {
    err += c.toString();
    check();
  });
  return {
    run: () => new Promise<void>((resolve) => {
      out = '';
      err = '';
      const nonce = randomBytes(12).toString('base64url');
      waiter = { key: `${nonce}~`, resolve };
      p.stdin.write(bothStreams ? `true;printf '%s~' ${nonce} >&2;printf '%s~' ${nonce}\n` : `true;printf '%s~' ${nonce}\n`);
    }),
    close: () => p.kill(),
  };
}

/** The stand-in API server in its own process (bench/k8s-standin-process.ts), and a client of it. */
export interface StandinProcess {
  client: KubeClient;
  kubeconfig: string;
  stop(): Promise<void>;
}

export async function startStandinProcess(opts: { plain?: boolean } = {}): Promise<StandinProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'berth-bench-k8s-'));
  const kubeconfig = join(dir, 'kubeconfig');
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'k8s-standin-process.ts'), kubeconfig, ...(opts.plain === true ? ['--plain'] : [])], { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`the stand-in process exited (${String(code)}) before it was ready`)));
  });
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  return {
    client: kubeClient(kc, 'berth'),
    kubeconfig,
    stop: async () => {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.stdin!.end();
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The stand-in's own pod start: create the Pod, wait for Running, one exec; no berth. Removal (waited out) is not timed. */
async function podToFirstCommand(cluster: StandinProcess, rounds: number): Promise<number[]> {
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
async function shellProtocolOverWebSocket(target: ExecTarget): Promise<PersistentShell> {
  return PersistentShell.start({
    open: (env) => spawnInPod(target, ['bash', '--noprofile', '--norc'], { env, cwd: WORKSPACE, stdin: true }),
    execOnce: (argv, o) => execOnceInPod(target, argv, o),
    stateDir: STATE_DIR, shellId: `bench-${randomBytes(3).toString('hex')}`, defaultCwd: WORKSPACE, secretNames: [], spillDir: undefined, maxOutputChars: 100_000,
  });
}

export async function kubernetesBench(n: number): Promise<void> {
  const why = await dockerUnavailable();
  if (why !== undefined) {
    console.log(`\n# kubernetes (stand-in): SKIPPED (the stand-in runs pods as docker containers: ${why})`);
    return;
  }
  const cluster = await startStandinProcess();
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-k8s-home-'));
  const broker = await Broker.open({
    config: parseConfig({ backend: 'kubernetes', persistent: false, kubernetes: { kubeconfig: cluster.kubeconfig, image: IMAGE, podStartTimeoutSeconds: 60 } }),
    berthHome: home, env: { PATH: process.env['PATH'] },
  });
  try {
    console.log('\n# kubernetes via the stand-in API server (its own process): trivial command, same pod (a lower bound for a cluster)');
    const session = broker.session({ session: 'bench' });
    await session.exec('true');
    const pod = broker.list('local')[0]!.name;
    const target = { client: cluster.client, pod, container: CONTAINER_NAME };
    const shell = await shellProtocolOverWebSocket(target);
    const bareShell = await bareShellOverWebSocket(target);
    const bare2Shell = await bareShellOverWebSocket(target, true);
    // Interleaved, one of each in turn, so the stand-in's warm-up and the box's load fall on all four alike.
    const [berthS, protocolS, bareS, bare2S] = await interleaved(n, [
      () => session.exec('true'), () => shell.run('true', { timeoutMs: 10_000 }), () => bareShell.run(), () => bare2Shell.run(),
    ]);
    await shell[Symbol.asyncDispose]();
    await bareShell.close();
    await bare2Shell.close();
    const berth = row('berth kubernetes session exec (exec WS)', berthS!);
    const protocol = row('berth shell protocol alone, own exec WS', protocolS!);
    const bare = row('bare bash, marker on stdout, own exec WS', bareS!);
    const bare2 = row('bare, marker on stderr then stdout', bare2S!);
    console.log(`  berth p50 / bare shell on the exec WS p50 = ${(berth.p50 / bare.p50).toFixed(2)}x   ${verdict('<= 1.3x', berth.p50 / bare.p50 <= 1.3)}; the shell protocol alone: ${(protocol.p50 / bare.p50).toFixed(2)}x; ` +
      `against the floor with both markers: ${(berth.p50 / bare2.p50).toFixed(2)}x`);

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
    rmSync(home, { recursive: true, force: true });
  }
}
