import { randomBytes } from 'node:crypto';
import { createEphemeralPod, deleteClaim, deletePod } from '../src/backends/kubernetes/pods.js';
import { ensureNetworkPolicy } from '../src/backends/kubernetes/network-policies.js';
import { sandboxPod, tenantNetworkPolicy } from '../src/backends/kubernetes/manifests.js';
import { dataClaimName } from '../src/backends/kubernetes/names.js';
import { Broker } from '../src/broker/broker.js';
import { parseConfig } from '../src/setup/parse-config.js';
import { BerthOnStandin } from '../test/k8s-standin/berth-on-standin.js';
import { sandboxInput } from '../test/k8s-standin/fixtures.js';
import { BENCH_IMAGE as IMAGE, dockerUnavailable } from './engine-check.js';

/*
 * How many requests berth sends the API server (the stand-in counts them by verb, as an audit
 * log would): per new session, per 100 commands in a live one, and in all for N sessions opened
 * at once under the stand-in's flow-control budget (429 + Retry-After). The baseline, measured
 * in the same run on the same stand-in, is a session's pod handled as berth did before it watched
 * (GET polls every 250 ms). Counts, not times: the stand-in runs in this process.
 *
 * N is BENCH_K8S_SESSIONS (default 50): every stand-in pod is a docker container on this machine.
 */

const SESSIONS = Number(process.env['BENCH_K8S_SESSIONS'] ?? 50);
const FLOW = { requestsPerSecond: 20, burst: 20 };

type Counts = Record<string, number>;

function minus(after: Counts, before: Counts): Counts {
  const out: Counts = {};
  for (const [verb, n] of Object.entries(after)) if (n - (before[verb] ?? 0) > 0) out[verb] = n - (before[verb] ?? 0);
  return out;
}

const total = (c: Counts): number => Object.values(c).reduce((a, b) => a + b, 0);
const show = (c: Counts, per = 1): string => Object.entries(c).sort().map(([v, n]) => `${v} ${(n / per).toFixed(1).replace(/\.0$/, '')}`).join(', ');

/**
 * The requests of a session's pod as berth sent them before it watched: the tenant policy's
 * create, the pod's create, a GET every 250 ms until it runs; at removal its delete, a GET every
 * 250 ms until it is gone, and the claim's delete.
 */
async function pollingBaseline(cluster: BerthOnStandin, rounds: number): Promise<Counts> {
  const before = { ...cluster.server.requests.byVerb };
  const pollUntil = async (name: string, done: (phase: string | undefined) => boolean): Promise<void> => {
    for (;;) {
      const phase = await cluster.client.core.readNamespacedPod({ namespace: 'berth', name }).then((p) => p.status?.phase ?? '', () => undefined);
      if (done(phase)) return;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  };
  for (let i = 0; i < rounds; i++) {
    const input = sandboxInput('bench-k8s-baseline', { k: { image: IMAGE } });
    await ensureNetworkPolicy(cluster.client, tenantNetworkPolicy(input.identity.installation, input.identity.tenant, input.kubernetes));
    await createEphemeralPod(cluster.client, sandboxPod(input));
    await pollUntil(input.name, (phase) => phase === 'Running');
    await deletePod(cluster.client, input.name);
    await pollUntil(input.name, (phase) => phase === undefined);
    await deleteClaim(cluster.client, dataClaimName(input.name));
  }
  return minus(cluster.server.requests.byVerb, before);
}

export async function k8sRequestsBench(): Promise<void> {
  const why = await dockerUnavailable();
  if (why !== undefined) {
    console.log(`\n# kubernetes API requests (stand-in): SKIPPED (the stand-in runs pods as docker containers: ${why})`);
    return;
  }
  const cluster = await BerthOnStandin.start({ flowControl: FLOW });
  const counts = (): Counts => ({ ...cluster.server.requests.byVerb });
  const broker = await Broker.open({
    config: parseConfig({ backend: 'kubernetes', persistent: false, limits: { sandboxes: Math.max(50, SESSIONS + 10), memoryMb: 64 * (SESSIONS + 10), diskMb: 8192 * (SESSIONS + 10), concurrentCalls: Math.max(100, SESSIONS + 10) }, kubernetes: cluster.section({ image: IMAGE, memoryMb: 64, memoryRequestMb: 32 }) }),
    berthHome: cluster.newHome(), env: { PATH: process.env['PATH'] },
  });
  try {
    console.log(`\n# kubernetes API requests, counted by the stand-in (flow control ${FLOW.requestsPerSecond}/s, burst ${FLOW.burst})`);
    const rounds = 5;
    const before = counts();
    for (let i = 0; i < rounds; i++) {
      const s = { session: `fresh-${randomBytes(4).toString('hex')}` };
      await broker.exec(s, 'true');
      await broker.removeSandboxOf(s);
    }
    const perSession = minus(counts(), before);
    console.log(`  per new session (start, first command, removal; n=${rounds}): ${(total(perSession) / rounds).toFixed(1)} (${show(perSession, rounds)})`);

    const baseline = await pollingBaseline(cluster, rounds);
    const api = (c: Counts): number => total(c) - (c['exec'] ?? 0);
    console.log(`  the same pod's API requests the way berth sent them before (250 ms GET polls): ${(api(baseline) / rounds).toFixed(1)} (${show(baseline, rounds)}); ` +
      `berth now / before = ${(api(perSession) / api(baseline)).toFixed(2)}x (exec upgrades apart: ${((perSession['exec'] ?? 0) / rounds).toFixed(1)} a session)`);

    const live = { session: 'live' };
    await broker.exec(live, 'true');
    const beforeCommands = counts();
    for (let i = 0; i < 100; i++) await broker.exec(live, 'true');
    const commands = minus(counts(), beforeCommands);
    console.log(`  per 100 commands in a live session: ${total(commands)}${total(commands) === 0 ? '' : ` (${show(commands)})`}`);
    await broker.removeSandboxOf(live);

    const beforeMany = counts();
    const rejectedBefore = cluster.server.requests.rejected;
    const t = Date.now();
    const results = await Promise.allSettled(Array.from({ length: SESSIONS }, (_, i) => broker.exec({ session: `many-${i}` }, 'echo ok')));
    const seconds = (Date.now() - t) / 1000;
    const ok = results.filter((r) => r.status === 'fulfilled' && r.value.exitCode === 0 && r.value.stdout.trim() === 'ok').length;
    const many = minus(counts(), beforeMany);
    console.log(`  ${SESSIONS} sessions opened at once: ${ok}/${SESSIONS} succeeded in ${seconds.toFixed(1)} s; ${total(many)} requests (${show(many)}), ` +
      `${cluster.server.requests.rejected - rejectedBefore} of them turned away with 429 and sent again; ${(total(many) / SESSIONS).toFixed(1)} a session`);
    const failed = results.find((r) => r.status === 'rejected');
    if (failed !== undefined) console.log(`  first failure: ${String((failed as PromiseRejectedResult).reason)}`);
  } finally {
    await broker.close({ graceMs: 2_000 });
    await cluster.stop();
  }
}
