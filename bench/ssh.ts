/*
 * SSH figures against the test sshd (eval "$(bash scripts/ensure-sshd.sh)" first), part `ssh` of
 * `npm run bench` (BENCH_SSH_N commands per loop, default 200): berth exec through the broker on
 * backend ssh against a bare shell on one ssh2 channel (the floor) and against the reference's
 * `ssh -o ControlMaster` per command; one spawn as a sandbox account (the launcher's cost); a new
 * session against a bare connect + exec; 20 sessions at once. Without a configured, answering sshd it prints why and skips.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ClientChannel } from 'ssh2';
import { RemoteAccounts } from '../src/backends/ssh/accounts.js';
import { SshConnection } from '../src/backends/ssh/connection.js';
import { SshConnectionPool } from '../src/backends/ssh/connections.js';
import { remoteRunner } from '../src/backends/ssh/remote-exec.js';
import { spawnAs } from '../src/backends/ssh/spawn.js';
import { DEFAULT_POOL_SETTINGS, type SshTarget } from '../src/backends/ssh/target.js';
import { Broker } from '../src/broker/broker.js';
import { StateStore } from '../src/broker/state/state-store.js';
import { parseConfig } from '../src/setup/parse-config.js';
import { MarkerShell } from './marker-shell.js';
import { fmt, interleaved, percentile, row, timeMany, verdict } from './stats.js';

const N = Number(process.env['BENCH_SSH_N'] ?? 200);

/** The test sshd from the environment, or why there is none. */
function targetFromEnv(): SshTarget | string {
  const missing = ['BERTH_TEST_SSH_HOST', 'BERTH_TEST_SSH_PORT', 'BERTH_TEST_SSH_USER', 'BERTH_TEST_SSH_KEY', 'BERTH_TEST_SSH_KNOWN_HOSTS']
    .filter((k) => (process.env[k] ?? '') === '');
  if (missing.length > 0) return `${missing.join(', ')} unset; run: eval "$(bash scripts/ensure-sshd.sh)"`;
  const need = (k: string): string => process.env[k] as string;
  return {
    host: need('BERTH_TEST_SSH_HOST'),
    port: Number(need('BERTH_TEST_SSH_PORT')),
    user: need('BERTH_TEST_SSH_USER'),
    identityFile: need('BERTH_TEST_SSH_KEY'),
    knownHostsFile: need('BERTH_TEST_SSH_KNOWN_HOSTS'),
    trustOnFirstUse: false,
  };
}

function untilClosed(channel: ClientChannel): Promise<void> {
  channel.resume();
  channel.stderr.resume();
  return new Promise((resolve) => channel.once('close', () => resolve()));
}

function sshControlMaster(target: SshTarget, controlPath: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const c = spawn('ssh', [
      '-p', String(target.port), '-i', target.identityFile ?? '', '-o', `UserKnownHostsFile=${target.knownHostsFile}`,
      '-o', 'StrictHostKeyChecking=yes', '-o', 'BatchMode=yes', '-o', 'ControlMaster=auto', '-o', `ControlPath=${controlPath}`,
      '-o', 'ControlPersist=120', `${target.user}@${target.host}`, 'true',
    ], { stdio: 'ignore' });
    c.on('error', reject);
    c.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`ssh exited ${code}`))));
  });
}

/** A broker on backend ssh at the test sshd, in a fresh BERTH_HOME. */
async function sshBroker(target: SshTarget, home: string): Promise<Broker> {
  const ssh = { host: target.host, port: target.port, user: target.user, identityFile: target.identityFile, knownHosts: target.knownHostsFile };
  return Broker.open({ config: parseConfig({ backend: 'ssh', persistent: false, ssh }), berthHome: home, env: { PATH: process.env['PATH'] }, reap: false });
}

/** Whether something accepts TCP connections at host:port. */
function answers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect({ host, port });
    const done = (ok: boolean): void => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(3_000, () => done(false));
    sock.once('connect', () => done(true));
    sock.once('error', () => done(false));
  });
}

/** The `ssh` part of `npm run bench`. */
export async function sshBench(): Promise<void> {
  const target = targetFromEnv();
  if (typeof target === 'string') {
    console.log(`\n# ssh: skipped (no test sshd: ${target})`);
    return;
  }
  if (!(await answers(target.host, target.port))) {
    console.log(`\n# ssh: skipped (the test sshd at ${target.host}:${target.port} does not answer; start it: bash scripts/ensure-sshd.sh)`);
    return;
  }
  const pool = new SshConnectionPool();
  const accounts = new RemoteAccounts(remoteRunner(pool, target), { endpoint: `${target.host}:${target.port}`, user: target.user });
  const home = mkdtempSync(join(tmpdir(), 'berth-ssh-bench-'));
  const controlDir = mkdtempSync(join(tmpdir(), 'berth-ssh-cm-'));
  const broker = await sshBroker(target, home);
  try {
    await accounts.check();
    console.log(`\n# ssh: one command, loopback sshd ${target.host}:${target.port} (n=${N})`);
    const { channel: bareCh } = await pool.exec(target, 'exec bash --noprofile --norc');
    const bare = MarkerShell.onChannel(bareCh, false);
    const { channel: bare2Ch } = await pool.exec(target, 'exec bash --noprofile --norc');
    const bare2 = MarkerShell.onChannel(bare2Ch, true);
    const session = broker.session({ session: 'bench' });
    await session.exec('true');
    const [floorS, floor2S, berthS] = await interleaved(N, [() => bare.run('true'), () => bare2.run('true'), () => session.exec('true')]);
    const floor = row('bare bash on one ssh2 channel (floor)', floorS!);
    row('bare, marker on stderr then stdout', floor2S!);
    const berth = row('berth exec (library, backend ssh, as the account)', berthS!);
    // At an agent's pace (a model's turn between commands, here 2 ms): the step the command groups
    // ask for after each command (remote-groups.ts) is done by the next one; back to back it is not.
    const pacedFloor: number[] = [];
    const pacedBerth: number[] = [];
    for (let i = 0; i < N; i++) {
      for (const [into, fn] of [[pacedFloor, () => bare.run('true')], [pacedBerth, () => session.exec('true')]] as const) {
        await new Promise((r) => setTimeout(r, 2));
        const t = process.hrtime.bigint();
        await fn();
        into.push(Number(process.hrtime.bigint() - t) / 1e6);
      }
    }
    const pf = row('floor, 2 ms after the last answer', pacedFloor);
    const pb = row('berth exec, 2 ms after the last answer', pacedBerth);
    console.log(`  at that pace: berth p50 / floor p50 = ${(pb.p50 / pf.p50).toFixed(2)}x`);
    bareCh.end();
    bare2Ch.end();

    const controlPath = join(controlDir, 'cm-%C');
    const ref = row('ssh -o ControlMaster host true (reference)', await timeMany(Math.min(N, 40), () => sshControlMaster(target, controlPath), 3));
    console.log(`  berth p50 / floor p50 = ${(berth.p50 / floor.p50).toFixed(2)}x   ${verdict('<= 1.5x', berth.p50 / floor.p50 <= 1.5)}`);
    console.log(`  reference p50 / berth p50 = ${(ref.p50 / berth.p50).toFixed(1)}x faster   ${verdict(">= 20x", ref.p50 / berth.p50 >= 20)}`);

    console.log('\n# ssh: opening things');
    row('channel: exec true on a warm connection', await timeMany(40, async () => untilClosed((await pool.exec(target, 'true')).channel), 5));
    const acct = await accounts.ensure({ name: `berth-${randomBytes(12).toString('hex')}`, installation: 'bench-spawn', digest: 'ab', ephemeral: true });
    try {
      const spawnCtx = { pool, target, homeRoot: accounts.homeRoot };
      row('spawn: true as a sandbox account (launcher)', await timeMany(40, async () => {
        const p = await spawnAs(spawnCtx, acct.name, ['/bin/true'], { env: {}, cwd: acct.workspace });
        p.stdout.resume();
        p.stderr.resume();
        p.stdin.end();
        await p.exited;
      }, 5));
    } finally {
      await accounts.remove(acct.name);
    }
    row('new connection (TCP + kex + auth)', await timeMany(10, async () => (await SshConnection.open(0, target, DEFAULT_POOL_SETTINGS)).close(), 2));
    const bareSamples: number[] = [];
    const warmSamples: number[] = [];
    const coldSamples: number[] = [];
    for (let i = 0; i < 5; i++) {
      let t = process.hrtime.bigint();
      const c = await SshConnection.open(0, target, DEFAULT_POOL_SETTINGS);
      await untilClosed(await c.exec('true'));
      bareSamples.push(Number(process.hrtime.bigint() - t) / 1e6);
      await c.close();
      t = process.hrtime.bigint();
      await broker.exec({ session: `new-${i}` }, 'true');
      warmSamples.push(Number(process.hrtime.bigint() - t) / 1e6);
      const coldHome = mkdtempSync(join(tmpdir(), 'berth-ssh-bench-cold-'));
      t = process.hrtime.bigint();
      const cold = await sshBroker(target, coldHome);
      await cold.exec({ session: 'cold' }, 'true');
      coldSamples.push(Number(process.hrtime.bigint() - t) / 1e6);
      await cold.closeSession({ session: 'cold' });
      await cold.close();
      rmSync(coldHome, { recursive: true, force: true });
    }
    const bareRow = row('bare: connect + exec true', bareSamples);
    const warmRow = row('berth: new session to first command (warm pool)', warmSamples);
    const coldRow = row('berth: new broker + session to first command (connect, check, account)', coldSamples);
    console.log(`  new session p50 / bare connect+exec p50 = ${(warmRow.p50 / bareRow.p50).toFixed(1)}x (warm pool), ${(coldRow.p50 / bareRow.p50).toFixed(1)}x (cold)`);

    console.log('\n# ssh: 20 concurrent sessions on one host');
    const t = process.hrtime.bigint();
    const answersOf = await Promise.all(Array.from({ length: 20 }, (_, i) => broker.exec({ session: `c${i}` }, 'id -u; cat ../../berth-*/workspace/x 2>/dev/null || echo isolated')));
    const ms = Number(process.hrtime.bigint() - t) / 1e6;
    const uids = new Set(answersOf.map((r) => r.stdout.split('\n')[0]));
    const ok = answersOf.every((r) => r.exitCode === 0 && r.stdout.endsWith('isolated\n')) && uids.size === 20 && !uids.has('0');
    console.log(`  20 sessions created and answering: ${ok ? 'all isolated (20 distinct uids) and answering' : 'FAILED'} in ${fmt(ms)}`);
    const again = await Promise.all(Array.from({ length: 20 }, async (_, i) => percentile(await timeMany(20, () => broker.exec({ session: `c${i}` }, 'true'), 2), 50)));
    console.log(`  per-session p50 while all 20 run at once: median ${fmt(percentile(again, 50))}, worst ${fmt(Math.max(...again))}`);
  } finally {
    await broker.close();
    const store = StateStore.open(home);
    const installation = store.installationId;
    store.close();
    for (const a of await accounts.list(installation).catch(() => [])) {
      await accounts.remove(a.name).catch((err: unknown) => console.error(`could not remove ${a.name}: ${String(err)}`));
    }
    await pool.close();
    rmSync(home, { recursive: true, force: true });
    await new Promise<void>((resolve) => {
      spawn('ssh', ['-o', `ControlPath=${join(controlDir, 'cm-%C')}`, '-p', String(target.port), '-O', 'exit', `${target.user}@${target.host}`], { stdio: 'ignore' }).on('close', () => resolve());
    });
    rmSync(controlDir, { recursive: true, force: true });
  }
}
