import { createHash, randomBytes } from 'node:crypto';
import { closeSync, readFileSync } from 'node:fs';
import type { Sandbox } from '../backends/backend.js';
import { egressDeniedOf } from '../backends/module.js';
import { listenInNetns, EGRESS_PROXY_PORT } from '../egress/netns-listener.js';
import { openPlaceholderSecret } from '../egress/placeholders.js';
import { parseProxyAddress, type ProxyAddress } from '../egress/proxy-address.js';
import { caBundle } from '../egress/sandbox-setup.js';
import { egressDir, EgressService, type Netns } from '../egress/service.js';
import type { ExtraDenied } from '../egress/target.js';
import type { EgressEvent, EgressSandbox } from '../egress/types.js';
import { systemBundlePem } from '../egress/upstream-trust.js';
import { BerthError, ConfigError } from '../errors.js';
import type { Logger } from '../logging/logger.js';
import type { BerthConfig } from '../setup/berth-config.js';
import { ownerAlive, ownerToken } from '../kit/process-owner.js';
import { usesEgressProxy, type EgressFiles, type ResolvedCall } from './resolve-call.js';
import type { EgressListenerTable, ListenerHolder } from './state/egress-listener-table.js';

/**
 * How often a sandbox served by another process is looked at: its holder gone, this one takes
 * over (a keeper whose call could not pass it the socket leaves a job this long without a proxy).
 */
const TAKEOVER_EVERY_MS = 250;

/** The holders of this process that are open (a holder names its process and a nonce: one process may run several brokers). */
const OPEN_HOLDERS = new Set<string>();

/** A listener holder is gone: its process ended, or (in this process) its broker closed. */
function holderDead(holder: string): boolean {
  const [pid, start] = holder.split(':');
  if (`${pid}:${start}` === ownerToken()) return !OPEN_HOLDERS.has(holder);
  return !ownerAlive(`${pid}:${start}`);
}

/** A holder for people: `pid 123`. */
function holderName(holder: string): string {
  return `pid ${holder.split(':')[0] ?? '?'}`;
}

/**
 * What a listener serves a sandbox, as a digest: its policy and its credentials' names, hosts,
 * injection and values (each by its own sha256; never a value). Two processes with the same
 * digest serve the sandbox alike.
 */
function contextDigest(egress: NonNullable<ResolvedCall['egress']>): string {
  const credentials = egress.credentials.map((c) => ({
    name: c.name, hosts: c.hosts, inject: c.inject ?? null, placeholder: c.placeholder,
    value: createHash('sha256').update(c.value, 'utf8').digest('hex'),
  }));
  return createHash('sha256').update(JSON.stringify({ policy: egress.policy, credentials })).digest('hex');
}

/**
 * A sandbox's listening socket an ending berth process passes to the process it starts to keep the
 * sandbox (a CLI call's, to `berth __keep`), as an inherited descriptor: the keeper serves that
 * same socket, so the sandbox's port never closes between the two.
 */
export interface PassedListener {
  /** The sandbox's ref. */
  ref: string;
  /** The descriptor: the passing process's own in `listenerFor`, the receiving one's in `inherit`. */
  fd: number;
  /** The namespace it listens in (`net:[inode]`). */
  ns: string;
  /** The passing broker as a listener holder: its row is the receiver's to take. */
  holder: string;
}

/** What the egress part asks of the call resolver: the proxy's files, once they are read. */
export interface EgressFilesSink {
  setEgressFiles(files: EgressFiles): void;
}

export interface SandboxEgressOptions {
  config: BerthConfig;
  berthHome: string;
  resolver: EgressFilesSink;
  /** Where each decision goes (audit, metrics, the dashboard). */
  onDecision: (e: EgressEvent) => void;
  /** Which process of the installation holds each sandbox's listener (the state store's). */
  listeners: EgressListenerTable;
  log: Logger;
}

/**
 * Whether a socket passed to this process for a sandbox is served here (see PassedListener): only
 * while the sandbox is still in the namespace the socket listens in (`ns`: the sandbox's now,
 * undefined when it cannot be read), and not when the passing process's row (`row`, the store's)
 * names another egress context than this call's `digest`. When served, the passer's row, to hand
 * back if this process lets go first; a row of a third process is left to the claim.
 *
 * @example
 * passedVerdict({ ns: 'net:[1]', holder: 'a' }, 'net:[2]', undefined, 'd') // → { serve: false, why: 'the sandbox is in another namespace now' }
 */
export function passedVerdict(
  passed: Pick<PassedListener, 'ns' | 'holder'>, ns: string | undefined, row: ListenerHolder | undefined, digest: string,
): { serve: true; row: ListenerHolder | undefined } | { serve: false; why: string } {
  if (ns === undefined) return { serve: false, why: 'the sandbox\'s namespace cannot be read' };
  if (ns !== passed.ns) return { serve: false, why: 'the sandbox is in another namespace now' };
  const passers = row?.holder === passed.holder ? row : undefined;
  if (passers !== undefined && passers.digest !== digest) return { serve: false, why: 'another egress context' };
  return { serve: true, row: passers };
}

/**
 * berth's egress proxy for the broker's sandboxes (docs/egress.md): made at open when a profile
 * uses it (allowlist, or credentials), a listener in each such sandbox's network namespace as the
 * sandbox becomes live (or, for sandboxes that reach it shared, the shared listener opened at open
 * and the sandbox registered on it by its proxy credential), and gone with the sandbox.
 *
 * A sandbox's listener is one process's at a time (its port in the sandbox's namespace): the
 * state store says whose (`egress_listeners`). A process that finds another live one of the
 * installation serving it the same egress context uses that one's listener; a different context is
 * a configuration error naming the fix; a holder that died is taken over; and a sandbox served by
 * another process is looked at every 250 ms, so that when that process ends this one listens in
 * its place. A CLI call that leaves a job passes the socket itself to its keeper instead (see
 * PassedListener), which serves it at once.
 */
export class SandboxEgress {
  private service: EgressService | undefined;
  /** This broker as a listener holder: its process and a nonce. */
  private readonly holder = `${ownerToken()}:${randomBytes(6).toString('hex')}`;
  /** Sandboxes whose listener this broker holds, with the call that gave each its context. */
  private readonly held = new Map<string, ResolvedCall>();
  /** Sandboxes another process serves for this broker's calls, to take over when it ends. */
  private readonly elsewhere = new Map<string, { call: ResolvedCall; sandbox: Sandbox }>();
  /** Listening sockets the process that started this one passed to it, by sandbox ref, until served or closed. */
  private readonly inherited = new Map<string, PassedListener>();
  /** Sandboxes served on a passed socket. */
  private readonly servingPassed = new Set<string>();
  /** Rows taken from the process that passed their socket, to hand back if this one lets go first. */
  private readonly takenFrom = new Map<string, ListenerHolder>();
  private watch: NodeJS.Timeout | undefined;

  constructor(private readonly o: SandboxEgressOptions) {
    OPEN_HOLDERS.add(this.holder);
  }

  /** Whether any place of the config uses the proxy. */
  get needed(): boolean {
    const { config } = this.o;
    return [config.base, ...Object.values(config.profiles)].some(usesEgressProxy);
  }

  /**
   * Reads or creates the CA and the placeholder secret and hands the call resolver what sandboxes
   * need of them. Loads the certificate library only when a profile uses the proxy.
   *
   * @throws ConfigError for an upstream CA file that cannot be read.
   */
  async open(): Promise<void> {
    if (!this.needed) return;
    const dir = egressDir(this.o.berthHome);
    const { upstreamCaFile, maxConnectionsPerSandbox } = this.o.config.egressProxy;
    let extraCaPem: string | undefined;
    if (upstreamCaFile !== undefined) {
      try {
        extraCaPem = readFileSync(upstreamCaFile, 'utf8');
      } catch (err) {
        throw new ConfigError(`egressProxy.upstreamCaFile ${upstreamCaFile} cannot be read (${(err as Error).message}); give a readable PEM bundle or remove the key`);
      }
    }
    const extraDenied = this.backendDenied();
    this.service = new EgressService({
      dir, log: this.o.log, port: EGRESS_PROXY_PORT, maxConnectionsPerSandbox, listen: listenInNetns, extraDenied: () => extraDenied,
      ...(extraCaPem === undefined ? {} : { upstreamTrust: { extraCaPem } }),
    });
    const caPem = await this.service.caCertPem();
    const sharedProxy = await this.openShared();
    this.o.resolver.setEgressFiles({
      secret: openPlaceholderSecret(dir), caPem, bundlePem: caBundle(systemBundlePem(), caPem), ...(sharedProxy === undefined ? {} : { sharedProxy }),
    });
  }

  /**
   * The ranges the backends of the config's places keep their sandboxes from (a cluster's
   * `blockedCidrs`), once each: one proxy serves every place, and a range one backend's network
   * blocks must not be reached through the proxy instead.
   */
  private backendDenied(): ExtraDenied[] {
    const { config } = this.o;
    const byCidr = new Map<string, ExtraDenied>();
    for (const place of [config.base, ...Object.values(config.profiles)]) {
      for (const d of egressDeniedOf(config.backends.module(place.backend), place)) if (!byCidr.has(d.cidr)) byCidr.set(d.cidr, d);
    }
    return [...byCidr.values()];
  }

  /** Opens the shared listener when it is configured; where sandboxes reach it. */
  private async openShared(): Promise<ProxyAddress | undefined> {
    const { listen, advertise } = this.o.config.egressProxy;
    if (listen === undefined || advertise === undefined) return undefined;
    const at = parseProxyAddress(listen);
    const reach = parseProxyAddress(advertise);
    if (typeof at === 'string' || typeof reach === 'string') throw new ConfigError(`egressProxy.listen and egressProxy.advertise ${typeof at === 'string' ? at : reach}`);
    await this.service!.listenShared(at.ip, at.port);
    return reach;
  }

  /**
   * Gives a live sandbox of `call` its listener (or its context anew: a later call's credentials).
   * A sandbox the proxy does not serve gets nothing.
   */
  async attach(call: ResolvedCall, sandbox: Sandbox): Promise<void> {
    if (call.egress === undefined) return;
    if (this.service === undefined) throw new Error('berth egress was not opened');
    const credential = call.egress.proxyCredential;
    if (credential === undefined && sandbox.netns === undefined) throw new Error(`backend ${call.settings.backend} gives no network namespace for berth's egress proxy`);
    const context: EgressSandbox = {
      identity: {
        tenant: call.scope.tenant, profile: call.scope.profile, sandboxKey: call.binding.sandboxKey,
        ...(call.scope.session === undefined ? {} : { session: call.scope.session }),
        ...(call.scope.user === undefined ? {} : { user: call.scope.user }),
      },
      policy: call.egress.policy,
      credentials: call.egress.credentials,
      onDecision: (e) => {
        try {
          this.o.onDecision(e);
        } catch (err) {
          this.o.log.debug(`egress decision not recorded: ${(err as Error).message}`);
        }
      },
    };
    if (credential !== undefined) {
      this.service.register(sandbox.ref, credential, context);
      return;
    }
    const ref = sandbox.ref;
    const digest = contextDigest(call.egress);
    const passed = await this.passedFor(ref, sandbox, digest);
    // The process that passed its socket here lets go of the sandbox: its row is taken as a dead
    // holder's (and handed back if this one lets go first while it lives).
    let claim: ReturnType<EgressListenerTable['claim']>;
    try {
      claim = this.o.listeners.claim(ref, this.holder, digest, Date.now(), (h) => h === passed?.holder || holderDead(h));
    } catch (err) {
      if (passed !== undefined) closeSync(passed.fd);
      throw err;
    }
    if (claim === 'mine' && passed?.row !== undefined) this.takenFrom.set(ref, passed.row);
    if (claim !== 'mine') {
      if (passed !== undefined) closeSync(passed.fd);
      if (claim.digest !== digest) {
        throw new ConfigError(
          `sandbox "${call.binding.sandboxKey}"'s egress proxy is served by another berth process of this installation (${holderName(claim.holder)}) ` +
            'with another egress policy or other credential values; run this call with the config and environment of that process ' +
            '(the same berth.yaml and the same credential sources), or stop that process',
        );
      }
      this.elsewhere.set(ref, { call, sandbox });
      this.watchElsewhere();
      return;
    }
    this.elsewhere.delete(ref);
    try {
      await this.service.attach(ref, passed?.netns ?? await sandbox.netns!(), context, passed?.fd);
      this.held.set(ref, call);
      if (passed !== undefined) {
        this.servingPassed.add(ref);
        this.o.log.debug(`sandbox ${call.binding.sandboxKey}: serving the egress listener the berth process that started this one passed to it`);
      }
    } catch (err) {
      this.letGoRow(ref);
      this.held.delete(ref);
      throw err;
    }
  }

  /**
   * Takes sandbox `ref`'s socket that the process which started this one passed to it (see
   * PassedListener), to serve when the sandbox is attached here; `closeInherited` closes those
   * not served by then.
   */
  inherit(passed: PassedListener): void {
    const before = this.inherited.get(passed.ref);
    if (before !== undefined) closeSync(before.fd);
    this.inherited.set(passed.ref, passed);
  }

  /** Closes the passed sockets no sandbox attached here took (their sandbox is not kept): the port closes as the passing process ends. */
  closeInherited(): void {
    for (const p of this.inherited.values()) closeSync(p.fd);
    this.inherited.clear();
  }

  /**
   * Sandbox `ref`'s socket passed to this process, to serve: only while the sandbox is still in
   * the namespace it listens in, and not when the passing process's row names another context
   * (else it is closed and the sandbox is attached as any other). With it, that row, if there is one.
   */
  private async passedFor(ref: string, sandbox: Sandbox, digest: string): Promise<{ fd: number; holder: string; netns: Netns; row: ListenerHolder | undefined } | undefined> {
    const passed = this.inherited.get(ref);
    if (passed === undefined) return undefined;
    this.inherited.delete(ref);
    const netns = await sandbox.netns?.().catch(() => undefined);
    const verdict = passedVerdict(passed, netns?.ns, this.o.listeners.get(ref), digest);
    if (!verdict.serve) {
      closeSync(passed.fd);
      this.o.log.debug(`sandbox ${ref.slice(0, 12)}: the passed egress listener is not served (${verdict.why})`);
      return undefined;
    }
    // Served only where the namespace was read (passedVerdict refuses an unreadable one).
    return { fd: passed.fd, holder: passed.holder, netns: netns!, row: verdict.row };
  }

  /**
   * Sandbox `ref`'s listening socket while this broker holds it, to pass to a process this one
   * starts (see PassedListener); undefined when it holds none or Node gives no descriptor.
   */
  listenerFor(ref: string): PassedListener | undefined {
    const l = this.held.has(ref) ? this.service?.listenerOf(ref) : undefined;
    return l === undefined ? undefined : { ref, fd: l.fd, ns: l.ns, holder: this.holder };
  }

  /** Whether this broker serves sandbox `ref` on the socket passed to it (see PassedListener). */
  servesPassed(ref: string): boolean {
    return this.servingPassed.has(ref);
  }

  /**
   * Lets go of sandbox `ref`'s row: back to the process whose row this one took with its passed
   * socket while that process lives (it still listens), else gone.
   */
  private letGoRow(ref: string): void {
    const from = this.takenFrom.get(ref);
    this.takenFrom.delete(ref);
    if (from !== undefined && !holderDead(from.holder) && this.o.listeners.handBack(ref, this.holder, from)) return;
    this.o.listeners.release(ref, this.holder);
  }

  /** Stops accepting sandbox `ref`'s connections here: the process it was passed to serves its socket (connections open here go on until the close). */
  stopAccepting(ref: string): void {
    this.service?.stopAccepting(ref);
  }

  /** The sandbox `ref` is going: its listener and connections go. */
  async detach(ref: string): Promise<void> {
    this.elsewhere.delete(ref);
    await this.service?.detach(ref);
    this.servingPassed.delete(ref);
    if (this.held.delete(ref)) this.letGoRow(ref);
  }

  /** Whether this broker serves the listener of sandbox `ref`. */
  holds(ref: string): boolean {
    return this.held.has(ref);
  }

  /** Whether this broker serves sandbox `ref`'s listener, or waits to take it over from another process. */
  serves(ref: string): boolean {
    return this.held.has(ref) || this.elsewhere.has(ref);
  }

  /** The call whose context this broker serves sandbox `ref` with, while it holds its listener. */
  heldCall(ref: string): ResolvedCall | undefined {
    return this.held.get(ref);
  }

  async close(): Promise<void> {
    clearInterval(this.watch);
    this.elsewhere.clear();
    this.closeInherited();
    try {
      await this.service?.close();
    } finally {
      for (const ref of this.held.keys()) this.letGoRow(ref);
      this.servingPassed.clear();
      this.held.clear();
      OPEN_HOLDERS.delete(this.holder);
    }
  }

  /** Looks at the sandboxes another process serves for this broker, every 250 ms while there are any. */
  private watchElsewhere(): void {
    if (this.watch !== undefined) return;
    this.watch = setInterval(() => void this.takeOver(), TAKEOVER_EVERY_MS);
    this.watch.unref();
  }

  /** Listens for each sandbox whose serving process has ended (or let go of it). */
  private async takeOver(): Promise<void> {
    for (const [ref, { call, sandbox }] of [...this.elsewhere]) {
      const row = this.o.listeners.get(ref);
      if (row !== undefined && !holderDead(row.holder)) continue;
      try {
        await this.attach(call, sandbox);
        if (this.held.has(ref)) this.o.log.info(`sandbox ${call.binding.sandboxKey}: took over its egress listener from a berth process that ended`);
      } catch (err) {
        this.elsewhere.delete(ref);
        this.o.log.warn(`sandbox ${call.binding.sandboxKey}: could not take over its egress listener: ${err instanceof BerthError ? err.message : String(err)}`);
      }
    }
    if (this.elsewhere.size === 0) {
      clearInterval(this.watch);
      this.watch = undefined;
    }
  }
}
