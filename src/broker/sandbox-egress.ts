import { readFileSync } from 'node:fs';
import type { Sandbox } from '../backends/backend.js';
import { egressDeniedOf } from '../backends/module.js';
import { listenInNetns, EGRESS_PROXY_PORT } from '../egress/netns-listener.js';
import { openPlaceholderSecret } from '../egress/placeholders.js';
import { parseProxyAddress, type ProxyAddress } from '../egress/proxy-address.js';
import { caBundle } from '../egress/sandbox-setup.js';
import { egressDir, EgressService } from '../egress/service.js';
import type { ExtraDenied } from '../egress/target.js';
import type { EgressEvent, EgressSandbox } from '../egress/types.js';
import { systemBundlePem } from '../egress/upstream-trust.js';
import { ConfigError } from '../errors.js';
import type { Logger } from '../logging/logger.js';
import type { BerthConfig } from '../setup/berth-config.js';
import { usesEgressProxy, type EgressFiles, type ResolvedCall } from './resolve-call.js';

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
  log: Logger;
}

/**
 * berth's egress proxy for the broker's sandboxes (docs/egress.md): made at open when a profile
 * uses it (allowlist, or credentials), a listener in each such sandbox's network namespace as the
 * sandbox becomes live (or, for sandboxes that reach it shared, the shared listener opened at open
 * and the sandbox registered on it by its proxy credential), and gone with the sandbox.
 */
export class SandboxEgress {
  private service: EgressService | undefined;

  constructor(private readonly o: SandboxEgressOptions) {}

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
    if (credential !== undefined) this.service.register(sandbox.ref, credential, context);
    else await this.service.attach(sandbox.ref, await sandbox.netns!(), context);
  }

  /** The sandbox `ref` is going: its listener and connections go. */
  async detach(ref: string): Promise<void> {
    await this.service?.detach(ref);
  }

  async close(): Promise<void> {
    await this.service?.close();
  }
}
