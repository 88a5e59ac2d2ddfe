import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Broker } from '../src/broker/broker.js';
import { execOnceInPod } from '../src/backends/kubernetes/exec-once.js';
import { CONTAINER_NAME, sandboxPod } from '../src/backends/kubernetes/manifests.js';
import { createEphemeralPod, deletePod, waitForRunning } from '../src/backends/kubernetes/pods.js';
import { sandboxInput } from '../test/k8s-standin/fixtures.js';
import { parseConfig } from '../src/setup/parse-config.js';
import { BENCH_IMAGE as IMAGE, dockerUnavailable } from './engine-check.js';
import { startStandinProcess, type StandinProcess } from './kubernetes.js';
import { fmt, interleaved, row } from './stats.js';

/*
 * What TLS costs a new session: berth's new session to its first exec through a stand-in API
 * server over HTTPS and wss (its own CA in the kubeconfig, as a cluster's) against one over plain
 * HTTP and ws, in the same run, one of each in turn. Both stand-ins run in processes of their
 * own; a new session makes a pod, its NetworkPolicy and a shell over an exec WebSocket, so it
 * pays the handshakes of its new exec connections (two; the REST pool is kept alive). That
 * difference is small against a pod start, so a second figure isolates it: a one-off command in a
 * running pod (one new exec connection each), over each, in turns.
 *
 *   BENCH_ONLY=k8s-tls BENCH_K8S_TLS_ROUNDS=10 npx tsx bench/run.ts
 */

async function brokerOn(cluster: StandinProcess, home: string): Promise<Broker> {
  return Broker.open({
    config: parseConfig({ backend: 'kubernetes', persistent: false, kubernetes: { kubeconfig: cluster.kubeconfig, image: IMAGE, podStartTimeoutSeconds: 60 } }),
    berthHome: home, env: { PATH: process.env['PATH'] },
  });
}

export async function k8sTlsBench(rounds: number): Promise<void> {
  const why = await dockerUnavailable();
  if (why !== undefined) {
    console.log(`\n# kubernetes TLS vs plain HTTP (stand-in): SKIPPED (the stand-in runs pods as docker containers: ${why})`);
    return;
  }
  const tls = await startStandinProcess();
  const plain = await startStandinProcess({ plain: true });
  const homes = [mkdtempSync(join(tmpdir(), 'berth-bench-tls-')), mkdtempSync(join(tmpdir(), 'berth-bench-plain-'))] as const;
  const brokers = [await brokerOn(tls, homes[0]), await brokerOn(plain, homes[1])] as const;
  try {
    console.log(`\n# kubernetes via the stand-in: new session to its first exec, HTTPS + wss against plain HTTP + ws (one of each in turn, the order alternating)`);
    const samples: [number[], number[]] = [[], []];
    // Round 0 warms each broker (its start-up checks, the tenant policy) and is not counted.
    for (let i = 0; i <= rounds; i++) {
      // Which goes first alternates, so neither always follows the other's pod removal.
      for (const k of i % 2 === 0 ? ([0, 1] as const) : ([1, 0] as const)) {
        const s = { session: `tls-${randomBytes(4).toString('hex')}` };
        const t = process.hrtime.bigint();
        await brokers[k].exec(s, 'true');
        if (i > 0) samples[k].push(Number(process.hrtime.bigint() - t) / 1e6);
        await brokers[k].removeSandboxOf(s);
      }
    }
    const a = row('new session to first exec, HTTPS + wss', samples[0]);
    const b = row('new session to first exec, plain HTTP + ws', samples[1]);
    console.log(`  TLS p50 - plain p50 = ${fmt(a.p50 - b.p50)} (${((a.p50 / b.p50 - 1) * 100).toFixed(1)}%)`);

    console.log(`\n# kubernetes via the stand-in: a one-off command in a running pod (a new exec connection each), HTTPS + wss against plain HTTP + ws`);
    const targets = [];
    for (const cluster of [tls, plain]) {
      const input = sandboxInput('bench-k8s-tls', { k: { image: IMAGE } });
      await createEphemeralPod(cluster.client, sandboxPod(input));
      await waitForRunning(cluster.client, input.name, 60_000);
      targets.push({ client: cluster.client, pod: input.name, container: CONTAINER_NAME });
    }
    const [onTls, onPlain] = await interleaved(rounds * 10, targets.map((t) => () => execOnceInPod(t, ['true'])), 20);
    const c = row('one-off command, HTTPS + wss', onTls!);
    const d = row('one-off command, plain HTTP + ws', onPlain!);
    console.log(`  TLS p50 - plain p50 = ${fmt(c.p50 - d.p50)} (${((c.p50 / d.p50 - 1) * 100).toFixed(1)}%)`);
    for (const t of targets) await deletePod(t.client, t.pod);
  } finally {
    for (const b of brokers) await b.close();
    await tls.stop();
    await plain.stop();
    for (const h of homes) rmSync(h, { recursive: true, force: true });
  }
}
