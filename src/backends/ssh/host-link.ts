import type { Logger } from '../../logging/logger.js';
import { RemoteAccounts } from './accounts.js';
import { SshConnectionPool } from './connections.js';
import { endpointOf } from './errors.js';
import { remoteRunner } from './remote-exec.js';
import { poolSettingsOf, targetOf, type SshSettings } from './settings.js';
import { targetKey, type SshTarget } from './target.js';

/**
 * The connections to one SSH host as one set of settings reaches it (login, key, known_hosts,
 * keepalives, channel bound), and its sandbox accounts under each home root. Constructing it
 * connects to nothing.
 */
export class HostLink implements AsyncDisposable {
  readonly target: SshTarget;
  readonly pool: SshConnectionPool;
  private readonly accounts = new Map<string, RemoteAccounts>();

  constructor(readonly settings: SshSettings, log: Logger) {
    this.target = targetOf(settings);
    this.pool = new SshConnectionPool(poolSettingsOf(settings), log);
  }

  /** What tells two settings apart that need their own connections. */
  static keyOf(settings: SshSettings): string {
    return JSON.stringify([targetKey(targetOf(settings)), poolSettingsOf(settings)]);
  }

  /** `host:port`, for messages. */
  get endpoint(): string {
    return endpointOf(this.target.host, this.target.port);
  }

  /** The sandbox accounts whose homes are under `homeRoot`. */
  accountsAt(homeRoot: string): RemoteAccounts {
    let a = this.accounts.get(homeRoot);
    if (a === undefined) {
      a = new RemoteAccounts(remoteRunner(this.pool, this.target), { endpoint: this.endpoint, user: this.target.user, homeRoot });
      this.accounts.set(homeRoot, a);
    }
    return a;
  }

  async close(): Promise<void> {
    await this.pool.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
