import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { describe, it } from 'vitest';
import { accountName } from '../../src/backends/ssh/account-name.js';
import { RemoteAccounts, type RemoteAccount } from '../../src/backends/ssh/accounts.js';
import { SshConnectionPool } from '../../src/backends/ssh/connections.js';
import { remoteRunner, type RemoteResult } from '../../src/backends/ssh/remote-exec.js';
import { spawnAs, type RemoteProcess, type SpawnContext } from '../../src/backends/ssh/spawn.js';
import type { PoolSettings, SshTarget } from '../../src/backends/ssh/target.js';

/*
 * The real sshd the SSH suites talk to, found through the variables that
 * `scripts/ensure-sshd.sh` prints (eval its output before running the suites):
 *   BERTH_TEST_SSH_HOST, BERTH_TEST_SSH_PORT, BERTH_TEST_SSH_USER, BERTH_TEST_SSH_KEY,
 *   BERTH_TEST_SSH_KNOWN_HOSTS (and BERTH_TEST_SSHD_DIR, where its config, pid and log are).
 * Without them (or when nothing answers there) the suites skip visibly with the reason; under
 * BERTH_REQUIRE_SSH=1 (CI) they fail instead.
 */

const VARS = ['BERTH_TEST_SSH_HOST', 'BERTH_TEST_SSH_PORT', 'BERTH_TEST_SSH_USER', 'BERTH_TEST_SSH_KEY', 'BERTH_TEST_SSH_KNOWN_HOSTS'] as const;

export function sshRequired(): boolean {
  return process.env['BERTH_REQUIRE_SSH'] === '1';
}

/** The configured test sshd, or why there is none. */
export function sshConfigured(env: NodeJS.ProcessEnv = process.env): { ok: true; target: SshTarget; dir: string | undefined } | { ok: false; reason: string } {
  const missing = VARS.filter((v) => (env[v] ?? '') === '');
  if (missing.length > 0) {
    return { ok: false, reason: `no test sshd configured (${missing.join(', ')} unset; run: eval "$(bash scripts/ensure-sshd.sh)")` };
  }
  const port = Number(env['BERTH_TEST_SSH_PORT']);
  if (!Number.isInteger(port) || port <= 0 || port > 65_535) return { ok: false, reason: `BERTH_TEST_SSH_PORT is not a port: ${env['BERTH_TEST_SSH_PORT']}` };
  return {
    ok: true,
    dir: env['BERTH_TEST_SSHD_DIR'],
    target: {
      host: env['BERTH_TEST_SSH_HOST'] as string,
      port,
      user: env['BERTH_TEST_SSH_USER'] as string,
      identityFile: env['BERTH_TEST_SSH_KEY'],
      knownHostsFile: env['BERTH_TEST_SSH_KNOWN_HOSTS'] as string,
      trustOnFirstUse: false,
    },
  };
}

/** Whether something accepts TCP connections at host:port within `timeoutMs`. */
export function answers(host: string, port: number, timeoutMs = 3_000): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect({ host, port });
    const done = (ok: boolean): void => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(timeoutMs, () => done(false));
    sock.once('connect', () => done(true));
    sock.once('error', () => done(false));
  });
}

async function status(): Promise<{ ok: true; target: SshTarget; dir: string | undefined } | { ok: false; reason: string }> {
  const c = sshConfigured();
  if (!c.ok) return c;
  if (!(await answers(c.target.host, c.target.port))) {
    return { ok: false, reason: `the test sshd at ${c.target.host}:${c.target.port} does not answer (start it: bash scripts/ensure-sshd.sh)` };
  }
  return c;
}

const found = await status();

/** The test sshd's target; only call it inside a `describeSsh` body. */
export function sshTarget(overrides: Partial<SshTarget> = {}): SshTarget {
  if (!found.ok) throw new Error(`no test sshd: ${found.reason}`);
  return { ...found.target, ...overrides };
}

/** Where ensure-sshd.sh keeps the sshd's files (config, pid, log), when known. */
export function sshdDir(): string | undefined {
  return found.ok ? found.dir : undefined;
}

/**
 * `describe` for a suite against the real sshd: runs when one is configured and answers;
 * otherwise a visible skip carrying the reason, or, under BERTH_REQUIRE_SSH=1, a failing test.
 */
export function describeSsh(name: string, body: () => void): void {
  if (found.ok) {
    describe(name, body);
    return;
  }
  const reason = found.reason;
  if (sshRequired()) {
    describe(name, () => {
      it('needs a reachable test sshd (BERTH_REQUIRE_SSH=1)', () => {
        throw new Error(`BERTH_REQUIRE_SSH=1 but ${reason}`);
      });
    });
    return;
  }
  console.warn(`skipping ${name}: ${reason}`);
  describe.skip(`${name} (skipped: ${reason})`, body);
}

/**
 * A pool, the host's accounts and the sandbox accounts one test made (removed by `cleanup()`,
 * which returns the names it removed, for a failure message).
 */
export class SshFixture implements AsyncDisposable {
  readonly pool: SshConnectionPool;
  readonly target: SshTarget;
  readonly accounts: RemoteAccounts;
  readonly installation = `test-${randomBytes(6).toString('hex')}`;
  private readonly made: string[] = [];

  constructor(settings: Partial<PoolSettings> = {}) {
    this.target = sshTarget();
    this.pool = new SshConnectionPool(settings);
    this.accounts = new RemoteAccounts(remoteRunner(this.pool, this.target), { endpoint: `${this.target.host}:${this.target.port}`, user: this.target.user });
  }

  get spawnContext(): SpawnContext {
    return { pool: this.pool, target: this.target, homeRoot: this.accounts.homeRoot };
  }

  /** A new sandbox account with a random identity digest. */
  async account(ephemeral = true): Promise<RemoteAccount> {
    const digest = randomBytes(32).toString('hex');
    const name = accountName(digest);
    this.made.push(name);
    return this.accounts.ensure({ name, installation: this.installation, digest, ephemeral });
  }

  /** Runs a bash script as the account (through the launcher); its combined output and exit code. */
  async runAs(acct: RemoteAccount, script: string, env: Record<string, string> = {}, ctx: SpawnContext = this.spawnContext): Promise<{ out: string; code: number | null }> {
    const p = await spawnAs(ctx, acct.name, ['/bin/bash', '--noprofile', '--norc', '-c', script], { env, cwd: acct.workspace });
    let out = '';
    p.stdout.on('data', (c: Buffer) => (out += c.toString()));
    p.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const ended = (r: NodeJS.ReadableStream): Promise<unknown> => new Promise((resolve) => r.once('end', resolve));
    const [exit] = await Promise.all([p.exited, ended(p.stdout), ended(p.stderr)]);
    return { out, code: exit.code };
  }

  /** Starts a long-running bash script as the account; resolves once it printed `ready`. */
  async startAs(acct: RemoteAccount, script: string, env: Record<string, string> = {}): Promise<RemoteProcess> {
    const p = await spawnAs(this.spawnContext, acct.name, ['/bin/bash', '--noprofile', '--norc', '-c', script], { env, cwd: acct.workspace });
    await new Promise<void>((resolve, reject) => {
      let out = '';
      p.stdout.on('data', (c: Buffer) => {
        out += c.toString();
        if (out.includes('ready')) resolve();
      });
      void p.exited.then(() => reject(new Error(`ended before ready: ${out}`)));
    });
    return p;
  }

  /** Runs a bash script as root on the host (behind berth's back). */
  root(script: string, args: readonly string[] = []): Promise<RemoteResult> {
    return remoteRunner(this.pool, this.target)(script, args);
  }

  async cleanup(): Promise<string[]> {
    const names = this.made.splice(0);
    for (const name of names) await this.accounts.remove(name);
    await this.pool.close();
    return names;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.cleanup();
  }
}
