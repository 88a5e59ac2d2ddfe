import { dirname } from 'node:path';
import { BackendUnavailableError, ConfigError } from '../../errors.js';
import { Logger } from '../../logging/logger.js';
import type { Backend, ManagedSandbox, Sandbox, SandboxSpec } from '../backend.js';
import { remoteRunner } from './remote-exec.js';
import { SshSnapshots, type SshPlace } from './snapshots.js';
import { SshProcessSandbox } from './ssh-process-sandbox.js';
import { accountName } from './account-name.js';
import { endpointOf } from './errors.js';
import { HostLink } from './host-link.js';
import { formatRef, parseRef, type SshRef } from './sandbox-ref.js';
import type { SshSettings } from './settings.js';
import { SshSandboxHandle } from './sandbox-handle.js';

export interface SshBackendOptions {
  installation: string;
  /** berth's home: snapshots of the accounts' homes live under it (snapshots.ts). */
  berthHome: string;
  /** The ssh sections of the config's places that use this backend: the hosts it may have sandboxes on. */
  configured: readonly SshSettings[];
  log?: Logger;
}

/**
 * `backend: ssh`: each sandbox is its own unprivileged account (`berth-<24 hex>`, home 0700) on
 * a remote host that berth logs in to as root, over pooled ssh2 connections (accounts.ts says
 * what the host needs and what one account can and cannot do to another). An unreachable host,
 * an untrusted host key or a host without what berth needs is an error (exit 125), never a
 * fallback to another host or to this machine.
 */
export class SshBackend implements Backend<SshSettings> {
  readonly name = 'ssh' as const;
  private readonly links = new Map<string, HostLink>();
  private readonly log: Logger;
  readonly snapshots: SshSnapshots;

  constructor(private readonly opts: SshBackendOptions) {
    this.log = opts.log ?? Logger.silent();
    this.snapshots = new SshSnapshots({
      berthHome: opts.berthHome,
      installation: opts.installation,
      log: this.log,
      placeOf: (ref) => this.placeOf(ref),
      open: (spec, knownRef) => this.open(spec, knownRef),
      removeSandbox: (ref) => this.remove(ref),
    });
  }

  /** Connects, checks the host key, root login and the tools the accounts and the launcher need. */
  async check(section: SshSettings): Promise<void> {
    const s = hostSettings(section);
    await this.linkOf(s).accountsAt(s.homeRoot).check();
  }

  /**
   * Creates or adopts the identity's account. A persistent sandbox is adopted by its identity
   * (the account is named by its digest); an ephemeral one only by its recorded ref: without
   * one, an account of the same identity is a leftover of a process that died, removed first,
   * so a new session never sees an old one's files.
   */
  async ensure(spec: SandboxSpec<SshSettings>, knownRef: string | undefined): Promise<Sandbox> {
    return (await this.open(spec, knownRef)).sandbox;
  }

  /** `ensure`, saying whether the account was created by it (a failed restore removes only one it made). */
  private async open(spec: SandboxSpec<SshSettings>, knownRef: string | undefined): Promise<{ sandbox: Sandbox; created: boolean }> {
    const s = hostSettings(spec.section);
    const link = this.linkOf(s);
    const accounts = link.accountsAt(s.homeRoot);
    const name = accountName(spec.digest);
    const fresh = spec.ephemeral && knownRef === undefined;
    const account = await accounts.ensure({ name, installation: this.opts.installation, digest: spec.digest, ephemeral: spec.ephemeral, fresh });
    const ref = formatRef({ user: link.target.user, host: link.target.host, port: link.target.port, account: name, homeRoot: s.homeRoot });
    const ctx = { pool: link.pool, log: this.log, target: link.target, homeRoot: s.homeRoot, maxProcesses: s.maxProcesses, tmpSizeMb: s.tmpSizeMb };
    return { sandbox: new SshProcessSandbox(new SshSandboxHandle(spec, ref, account, ctx, knownRef !== undefined && account.created)), created: account.created };
  }

  /** Where the recorded sandbox `ref` lives, for its snapshots. */
  private placeOf(ref: string): SshPlace {
    const r = parseRef(ref);
    const link = this.linkFor(r);
    return { pool: link.pool, target: link.target, run: remoteRunner(link.pool, link.target), homeRoot: r.homeRoot, account: r.account };
  }

  /** Ends every process of the account and removes it, its home and its record. Gone already is success. */
  async remove(ref: string): Promise<void> {
    const r = parseRef(ref);
    const { killed } = await this.linkFor(r).accountsAt(r.homeRoot).remove(r.account, this.opts.installation);
    this.log.with({ ref }).debug(`removed (${killed} processes ended)`);
  }

  /** Ends every process of the account; its files stay. */
  async stop(ref: string): Promise<void> {
    const r = parseRef(ref);
    await this.linkFor(r).accountsAt(r.homeRoot).stop(r.account, this.opts.installation);
  }

  /**
   * This installation's accounts on every host the config names, from the root-owned records
   * the accounts were made with. A host that does not answer fails the whole list: a partial one
   * would make its sandboxes look removed.
   */
  async listManaged(): Promise<ManagedSandbox[]> {
    const seen = new Set<string>();
    const out: ManagedSandbox[] = [];
    for (const s of this.hosts()) {
      const link = this.linkOf(s);
      const where = `${link.target.user}@${link.endpoint}`;
      if (seen.has(where)) continue;
      seen.add(where);
      for (const a of await link.accountsAt(s.homeRoot).list(this.opts.installation)) {
        const homeRoot = a.home === undefined ? s.homeRoot : dirname(a.home);
        out.push({
          ref: formatRef({ user: link.target.user, host: link.target.host, port: link.target.port, account: a.name, homeRoot }),
          name: a.name,
          digest: a.digest,
          ephemeral: a.ephemeral,
          // Stopped (hibernated) once its namespaces are gone; its account and files stay.
          running: a.exists && a.up,
        });
      }
    }
    return out;
  }

  async close(): Promise<void> {
    const links = [...this.links.values()];
    this.links.clear();
    await Promise.all(links.map((l) => l.close()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** The configured hosts, then those calls brought (a test's spec, a task override). */
  private hosts(): SshSettings[] {
    return [...this.opts.configured.filter((s) => s.host !== undefined), ...[...this.links.values()].map((l) => l.settings)];
  }

  private linkOf(s: SshSettings): HostLink {
    const key = HostLink.keyOf(s);
    let link = this.links.get(key);
    if (link === undefined) {
      link = new HostLink(s, this.log);
      this.links.set(key, link);
    }
    return link;
  }

  /** The link that reaches a recorded sandbox's host: one the config (or a call) names. */
  private linkFor(r: SshRef): HostLink {
    const s = this.hosts().find((h) => h.user === r.user && h.port === r.port && h.host?.toLowerCase() === r.host.toLowerCase());
    if (s === undefined) {
      throw new BackendUnavailableError(
        `sandbox account ${r.account} is on SSH host ${r.user}@${endpointOf(r.host, r.port)}, which no profile of this config uses any more; ` +
          `set ssh.host back to it to let berth remove the account, or remove it there by hand (pkill -KILL -u ${r.account}; userdel -r ${r.account})`,
      );
    }
    return this.linkOf(s);
  }
}

/** A place's ssh section, whose host the config rules made sure of. */
function hostSettings(s: SshSettings): SshSettings {
  if (s.host === undefined) throw new ConfigError('backend ssh needs ssh.host: set it to the name or address of the host to run sandboxes on');
  return s;
}
