/*
 * SSH transport figures against the test sshd (eval "$(bash scripts/ensure-sshd.sh)" first):
 *   npx tsx bench/ssh.ts            (BENCH_SSH_N commands per loop, default 200)
 * Not wired into bench/run.ts yet: the SSH backend does not exist until the seam lands; this
 * measures its parts (a channel, the launcher, berth's shell over a channel as a sandbox account).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ClientChannel } from 'ssh2';
import type { SpawnOptions } from '../src/backends/backend.js';
import { accountName } from '../src/backends/ssh/account-name.js';
import { RemoteAccounts, type RemoteAccount } from '../src/backends/ssh/accounts.js';
import { SshConnection } from '../src/backends/ssh/connection.js';
import { SshConnectionPool } from '../src/backends/ssh/connections.js';
import { remoteRunner } from '../src/backends/ssh/remote-exec.js';
import { execOnce } from '../src/backends/plumbing/exec-once.js';
import { openShellVia } from '../src/backends/plumbing/open-shell.js';
import { spawnIn } from '../src/backends/ssh/ssh-sandbox.js';
import { spawnAs } from '../src/backends/ssh/spawn.js';
import { DEFAULT_POOL_SETTINGS, type SshTarget } from '../src/backends/ssh/target.js';
import { PersistentShell } from '../src/shell/persistent-shell.js';
import { fmt, percentile, row, timeMany } from './stats.js';

const N = Number(process.env['BENCH_SSH_N'] ?? 200);

function targetFromEnv(): SshTarget {
  const need = (k: string): string => {
    const v = process.env[k];
    if (v === undefined || v === '') throw new Error(`${k} is not set; run: eval "$(bash scripts/ensure-sshd.sh)"`);
    return v;
  };
  return {
    host: need('BERTH_TEST_SSH_HOST'),
    port: Number(need('BERTH_TEST_SSH_PORT')),
    user: need('BERTH_TEST_SSH_USER'),
    identityFile: need('BERTH_TEST_SSH_KEY'),
    knownHostsFile: need('BERTH_TEST_SSH_KNOWN_HOSTS'),
    trustOnFirstUse: false,
  };
}

/**
 * The floor: a bare bash on one ssh2 channel, a marker per command, nothing else. With
 * `bothStreams` the marker is printed on stderr, then stdout, and both are awaited: the shape of
 * berth's trailer, which costs a second SSH message per command.
 */
class BareChannelShell {
  private out = '';
  private err = '';
  private waiter: { marker: string; resolve: () => void } | undefined;

  constructor(private readonly channel: ClientChannel, private readonly bothStreams: boolean) {
    channel.setEncoding('utf8');
    channel.stderr.setEncoding('utf8');
    channel.on('data', (d: string) => {
      this.out += d;
      this.check();
    });
    channel.stderr.on('data', (d: string) => {
      this.err += d;
      this.check();
    });
  }

  run(cmd: string): Promise<void> {
    const marker = `__END_${randomBytes(12).toString('hex')}__`;
    const tail = this.bothStreams ? `printf '%s' '${marker}' >&2; printf '%s' '${marker}'` : `printf '%s' '${marker}'`;
    return new Promise((resolve) => {
      this.waiter = { marker, resolve };
      this.channel.write(`${cmd}\n${tail}\n`);
    });
  }

  private check(): void {
    const w = this.waiter;
    if (w === undefined || !this.out.includes(w.marker) || (this.bothStreams && !this.err.includes(w.marker))) return;
    this.out = '';
    this.err = '';
    this.waiter = undefined;
    w.resolve();
  }
}

/** Times `fns` in turns (one sample of each per round), so load that comes and goes hits all alike. */
async function interleaved(n: number, fns: Array<() => Promise<unknown>>, warmup = 20): Promise<number[][]> {
  for (let i = 0; i < warmup; i++) for (const fn of fns) await fn();
  const out = fns.map(() => [] as number[]);
  for (let i = 0; i < n; i++) {
    for (let k = 0; k < fns.length; k++) {
      const t = process.hrtime.bigint();
      await fns[k]!();
      out[k]!.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
  }
  return out;
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

async function newAccount(accounts: RemoteAccounts, made: string[], installation: string): Promise<RemoteAccount> {
  const digest = randomBytes(32).toString('hex');
  const name = accountName(digest);
  made.push(name);
  return accounts.ensure({ name, installation, digest, ephemeral: true });
}

async function berthShell(pool: SshConnectionPool, target: SshTarget, accounts: RemoteAccounts, acct: RemoteAccount, spillDir: string): Promise<PersistentShell> {
  const ctx = { pool, target, homeRoot: accounts.homeRoot };
  const sp = (argv: readonly string[], o: SpawnOptions) => spawnIn(ctx, acct, argv, o);
  return PersistentShell.start({
    open: (env) => openShellVia(sp, { env, cwd: acct.workspace }),
    execOnce: (argv, opts) => execOnce(sp, argv, opts, acct.name),
    stateDir: acct.stateDir,
    shellId: 'bench',
    defaultCwd: acct.workspace,
    secretNames: [],
    spillDir,
    maxOutputChars: 100_000,
  });
}

async function main(): Promise<void> {
  const target = targetFromEnv();
  const pool = new SshConnectionPool();
  const accounts = new RemoteAccounts(remoteRunner(pool, target), { endpoint: `${target.host}:${target.port}`, user: target.user });
  const installation = `bench-${randomBytes(4).toString('hex')}`;
  const made: string[] = [];
  const spillDir = mkdtempSync(join(tmpdir(), 'berth-ssh-bench-'));
  const controlDir = mkdtempSync(join(tmpdir(), 'berth-ssh-cm-'));
  try {
    await accounts.check();
    console.log(`\n# ssh: one command, loopback sshd ${target.host}:${target.port} (n=${N})`);
    const { channel: bareCh } = await pool.exec(target, 'exec bash --noprofile --norc');
    const bare = new BareChannelShell(bareCh, false);
    const { channel: bare2Ch } = await pool.exec(target, 'exec bash --noprofile --norc');
    const bare2 = new BareChannelShell(bare2Ch, true);
    const acct = await newAccount(accounts, made, installation);
    const shell = await berthShell(pool, target, accounts, acct, spillDir);
    const [floorS, floor2S, berthS] = await interleaved(N, [() => bare.run('true'), () => bare2.run('true'), () => shell.run('true', { timeoutMs: 30_000 })]);
    const floor = row('bare bash on one ssh2 channel (floor)', floorS!);
    row('bare, marker on stderr then stdout', floor2S!);
    const berth = row('berth shell on one channel, as the account', berthS!);
    bareCh.end();
    bare2Ch.end();
    await shell.close();

    const controlPath = join(controlDir, 'cm-%C');
    const ref = row('ssh -o ControlMaster host true (reference)', await timeMany(Math.min(N, 40), () => sshControlMaster(target, controlPath), 3));
    console.log(`  berth p50 / floor p50 = ${(berth.p50 / floor.p50).toFixed(2)}x   (target <= 1.5x)`);
    console.log(`  reference p50 / berth p50 = ${(ref.p50 / berth.p50).toFixed(1)}x faster   (target >= 20x)`);

    console.log('\n# ssh: opening things');
    row('channel: exec true on a warm connection', await timeMany(40, async () => untilClosed((await pool.exec(target, 'true')).channel), 5));
    row('spawnAs /bin/true as the account (launcher)', await timeMany(40, async () => {
      const p = await spawnAs({ pool, target, homeRoot: accounts.homeRoot }, acct.name, ['/bin/true'], { env: {}, cwd: acct.workspace });
      p.stdout.resume();
      p.stderr.resume();
      await p.exited;
    }, 5));
    row('new connection (TCP + kex + auth)', await timeMany(10, async () => (await SshConnection.open(0, target, DEFAULT_POOL_SETTINGS)).close(), 2));

    const firstSamples: number[] = [];
    const bareSamples: number[] = [];
    for (let i = 0; i < 5; i++) {
      let t = process.hrtime.bigint();
      const c = await SshConnection.open(0, target, DEFAULT_POOL_SETTINGS);
      await untilClosed(await c.exec('true'));
      bareSamples.push(Number(process.hrtime.bigint() - t) / 1e6);
      await c.close();
      await using fresh = new SshConnectionPool();
      const freshAccounts = new RemoteAccounts(remoteRunner(fresh, target), { endpoint: `${target.host}:${target.port}`, user: target.user });
      t = process.hrtime.bigint();
      const a = await newAccount(freshAccounts, made, installation);
      const sh = await berthShell(fresh, target, freshAccounts, a, spillDir);
      await sh.run('true', { timeoutMs: 30_000 });
      firstSamples.push(Number(process.hrtime.bigint() - t) / 1e6);
      await sh.close();
    }
    row('bare: connect + exec true', bareSamples);
    row('new session: connect, create account, shell, first command', firstSamples);

    console.log('\n# ssh: 20 concurrent sessions on one host');
    const t = process.hrtime.bigint();
    const accts = await Promise.all(Array.from({ length: 20 }, () => newAccount(accounts, made, installation)));
    const shells = await Promise.all(accts.map((a) => berthShell(pool, target, accounts, a, spillDir)));
    const answers = await Promise.all(shells.map((s, i) => s.run(`id -u; cat ${accts[(i + 1) % accts.length]!.workspace}/../.berth/x 2>/dev/null || echo isolated`, { timeoutMs: 60_000 })));
    const ms = Number(process.hrtime.bigint() - t) / 1e6;
    const ok = answers.every((r, i) => r.stdout === `${accts[i]!.uid}\nisolated\n`);
    console.log(`  20 sessions created and answering: ${ok ? 'all isolated and answering' : 'FAILED'} in ${fmt(ms)}; connections: ${pool.connectionsOf(target).length}, refused channels: ${pool.refusedChannels}`);
    const again = await Promise.all(shells.map(async (s) => {
      const samples = await timeMany(20, () => s.run('true', { timeoutMs: 30_000 }), 2);
      return percentile(samples, 50);
    }));
    console.log(`  per-session p50 while all 20 run at once: median ${fmt(percentile(again, 50))}, worst ${fmt(Math.max(...again))}`);
    await Promise.all(shells.map((s) => s.close()));
  } finally {
    for (const name of made) await accounts.remove(name).catch((err: unknown) => console.error(`could not remove ${name}: ${String(err)}`));
    await pool.close();
    rmSync(spillDir, { recursive: true, force: true });
    await new Promise<void>((resolve) => {
      spawn('ssh', ['-o', `ControlPath=${join(controlDir, 'cm-%C')}`, '-p', String(target.port), '-O', 'exit', `${target.user}@${target.host}`], { stdio: 'ignore' }).on('close', () => resolve());
    });
    rmSync(controlDir, { recursive: true, force: true });
  }
}

await main();
