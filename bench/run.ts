import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Broker } from '../src/broker/broker.js';
import { parseConfig } from '../src/setup/parse-config.js';
import { RawShell, spawnPerCommand } from './raw-shell.js';
import { row, verdict, timeMany } from './stats.js';
import { bwrapBench } from './bwrap.js';
import { dockerBench } from './docker.js';
import { egressBench } from './egress.js';
import { hibernateBench } from './hibernate.js';
import { httpBench } from './http.js';
import { k8sRequestsBench } from './k8s-requests.js';
import { k8sTlsBench } from './k8s-tls.js';
import { kubernetesBench } from './kubernetes.js';
import { mcpBench } from './mcp.js';
import { startupBench } from './startup.js';
import { topFirstFrameBench } from './top-first-frame.js';
import { scaleBench } from './scale.js';
import { snapshotBench } from './snapshot.js';
import { sshBench } from './ssh.js';
import { uploadRssBench } from './upload-rss.js';

const N = Number(process.env['BENCH_N'] ?? 2000);
/** `BENCH_ONLY=http` (comma-separated: startup, top, local, docker, bwrap, ssh, kubernetes, k8s-requests, k8s-tls, http, mcp, upload, egress, snapshot, scale, hibernate) runs only those parts; scale (1,000 and 2,000 docker sessions, several minutes) and hibernate (resume, density from 250 docker sandboxes, crash recovery; see bench/hibernate.ts) run only when named. */
const ONLY = new Set((process.env['BENCH_ONLY'] ?? '').split(',').map((s) => s.trim()).filter((s) => s !== ''));
const wanted = (part: string): boolean => ONLY.size === 0 || ONLY.has(part);

async function localBench(): Promise<void> {
  console.log(`\n# local backend: trivial command round trip (n=${N})`);
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-'));
  try {
    const raw = new RawShell();
    const rawRow = row('raw persistent bash (pipe + nonce)', await timeMany(N, () => raw.run('true')));
    raw.close();

    const broker = await Broker.open({ config: parseConfig({ backend: 'local' }), berthHome: home, env: { PATH: process.env['PATH'] } });
    const session = broker.session({ session: 'bench' });
    const berthRow = row('berth library exec (local backend)', await timeMany(N, () => session.exec('true')));
    await broker.close();

    const spawnRow = row('spawn bash -c per command', await timeMany(Math.min(N, 300), () => spawnPerCommand('true'), 20));
    console.log(`  berth p50 / raw p50 = ${(berthRow.p50 / rawRow.p50).toFixed(2)}x   ${verdict('<= 1.5x', berthRow.p50 / rawRow.p50 <= 1.5)}`);
    console.log(`  spawn p50 / berth p50 = ${(spawnRow.p50 / berthRow.p50).toFixed(1)}x faster   ${verdict('>= 3x', spawnRow.p50 / berthRow.p50 >= 3)}`);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

if (wanted('startup')) await startupBench();
if (wanted('top')) await topFirstFrameBench();
if (wanted('local')) await localBench();
if (wanted('docker')) await dockerBench();
if (wanted('bwrap')) await bwrapBench();
if (wanted('ssh')) await sshBench();
if (wanted('kubernetes')) await kubernetesBench(Math.min(N, 1000));
if (wanted('k8s-requests')) await k8sRequestsBench();
if (wanted('k8s-tls')) await k8sTlsBench(Number(process.env['BENCH_K8S_TLS_ROUNDS'] ?? 10));
if (wanted('http')) await httpBench();
if (wanted('mcp')) await mcpBench(N);
if (wanted('upload')) await uploadRssBench();
if (wanted('egress')) await egressBench();
if (wanted('snapshot')) await snapshotBench();
if (ONLY.has('scale')) await scaleBench();
if (ONLY.has('hibernate')) await hibernateBench();
