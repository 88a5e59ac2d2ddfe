import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RemoteAccounts } from '../../src/backends/ssh/accounts.js';
import { SshConnectionPool } from '../../src/backends/ssh/connections.js';
import { remoteRunner } from '../../src/backends/ssh/remote-exec.js';
import { parseRef } from '../../src/backends/ssh/sandbox-ref.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { sshTarget } from './sshd.js';

/** The `ssh:` config section that reaches the test sshd (only inside a `describeSsh` body). */
export function sshConfigSection(): Record<string, unknown> {
  const t = sshTarget();
  return { host: t.host, port: t.port, user: t.user, identityFile: t.identityFile, knownHosts: t.knownHostsFile };
}

/**
 * BERTH_HOMEs of SSH tests and what they leave on the test host: `cleanup()` removes every
 * sandbox account of their installations (and the dirs), so no `berth-*` account outlives a test.
 */
export class SshInstalls {
  private readonly homes: string[] = [];
  private pool: SshConnectionPool | undefined;

  /** A new BERTH_HOME (its installation id is made on first open). */
  newHome(): string {
    const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-ssh-e2e-')));
    this.homes.push(home);
    return home;
  }

  /** The test host's sandbox accounts, as root (for reaching behind berth's back). */
  accounts(): RemoteAccounts {
    this.pool ??= new SshConnectionPool();
    const t = sshTarget();
    return new RemoteAccounts(remoteRunner(this.pool, t), { endpoint: `${t.host}:${t.port}`, user: t.user });
  }

  /** Removes the account behind an ssh sandbox ref (as an admin's userdel would). */
  async removeOutOfBand(ref: string): Promise<void> {
    await this.accounts().remove(parseRef(ref).account);
  }

  /** Removes what the homes' installations left on the host; returns the account names removed. */
  async cleanup(): Promise<string[]> {
    const removed: string[] = [];
    const accounts = this.accounts();
    for (const home of this.homes.splice(0)) {
      const store = StateStore.open(home);
      const installation = store.installationId;
      store.close();
      for (const a of await accounts.list(installation)) {
        await accounts.remove(a.name);
        removed.push(a.name);
      }
      rmSync(home, { recursive: true, force: true });
    }
    await this.pool?.close();
    this.pool = undefined;
    return removed;
  }
}
