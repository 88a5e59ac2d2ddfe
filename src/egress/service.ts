import { closeSync } from 'node:fs';
import type { Server, Socket } from 'node:net';
import { join } from 'node:path';
import type { Logger } from '../logging/logger.js';
import { listeningFd, serveInheritedListener } from './netns-listener.js';
import type { ProxyCredential } from './proxy-credential.js';
import type { EgressProxy } from './proxy.js';
import type { SharedEgressListener } from './shared-listener.js';
import type { ExtraDenied } from './target.js';
import type { EgressSandbox } from './types.js';
import type { UpstreamTrust } from './upstream-trust.js';

/*
 * berth's egress for its sandboxes: one proxy for the process, made on first use (it loads the
 * certificate library), and one listener per sandbox inside that sandbox's network namespace, so
 * the sandbox a connection comes from is known from where it arrived. Each connection a listener
 * accepts goes to the proxy with that sandbox's context. Sandboxes whose namespace berth cannot
 * enter (pods on a cluster) reach one shared listener instead and name themselves by their proxy
 * credential (shared-listener.ts).
 */

/** Opens a listening socket inside a network namespace (see netns-listener.ts); injectable for tests. */
export type NetnsListen = (netnsPath: string, opts: { host: string; port: number; maxConnections: number; expectNs: string }) => Promise<Server>;

/** A sandbox's network namespace: a path to open, and the namespace (`net:[inode]`) it must name. */
export interface Netns {
  path: string;
  ns: string;
}

export interface EgressServiceOptions {
  /** Where the CA and the placeholder secret live (`$BERTH_HOME/egress`). */
  dir: string;
  log: Logger;
  /** The port every sandbox finds the proxy on, at 127.0.0.1 inside its own namespace. */
  port: number;
  /** A sandbox's concurrent connections to the proxy at most. */
  maxConnectionsPerSandbox: number;
  /** Ranges refused besides the always-denied ones, read when the proxy is made. */
  extraDenied?: () => readonly ExtraDenied[];
  upstreamTrust?: UpstreamTrust;
  listen: NetnsListen;
}

interface Attached {
  ns: string;
  server: Server;
  sandbox: EgressSandbox;
}

export class EgressService implements AsyncDisposable {
  private proxy: Promise<EgressProxy> | undefined;
  private readonly attached = new Map<string, Attached>();
  private readonly attaching = new Map<string, Promise<void>>();
  private shared: SharedEgressListener | undefined;
  private closed = false;

  constructor(private readonly o: EgressServiceOptions) {}

  /** The proxy, made on first use. */
  proxyNow(): Promise<EgressProxy> {
    this.proxy ??= (async () => {
      const [{ EgressCa }, { createEgressProxy }] = await Promise.all([import('./ca.js'), import('./proxy.js')]);
      const ca = await EgressCa.open(this.o.dir);
      return createEgressProxy({
        ca, log: this.o.log, extraDenied: this.o.extraDenied?.() ?? [],
        ...(this.o.upstreamTrust === undefined ? {} : { upstreamTrust: this.o.upstreamTrust }),
      });
    })();
    this.proxy.catch(() => {
      this.proxy = undefined;
    });
    return this.proxy;
  }

  /** The CA certificate (PEM) sandboxes trust for their intercepted hosts. */
  async caCertPem(): Promise<string> {
    return (await this.proxyNow()).caCertPem;
  }

  /**
   * Listens for sandbox `ref` inside `netns` and sends what arrives to the proxy with `sandbox`.
   * Again for the same namespace: only the context is replaced (a later call's credentials); for
   * a new namespace (the sandbox's processes were started again) the old listener goes first.
   * The namespace is compared by identity, never by path (a pid can be reused).
   *
   * @param inheritedFd a listening socket in that namespace this process inherited from the berth
   *   process that served the sandbox (see netns-listener.ts): served instead of a new one, and
   *   closed when the sandbox is served already.
   */
  async attach(ref: string, netns: Netns, sandbox: EgressSandbox, inheritedFd?: number): Promise<void> {
    for (;;) {
      const pending = this.attaching.get(ref);
      if (pending === undefined) break;
      await pending.catch(() => undefined);
    }
    const current = this.attached.get(ref);
    if (current !== undefined && current.ns === netns.ns) {
      current.sandbox = sandbox;
      if (inheritedFd !== undefined) closeSync(inheritedFd);
      return;
    }
    const work = (async () => {
      // The passed socket is closed here on any failure before serveInheritedListener owns it.
      let passed = inheritedFd;
      try {
        if (current !== undefined) await this.detach(ref);
        if (this.closed) throw new Error('berth egress is closed');
        const proxy = await this.proxyNow();
        // A new sandbox may come with a new bridge whose gateway is this host's: read its addresses now.
        proxy.refreshHostAddresses();
        const at = { host: '127.0.0.1', port: this.o.port, maxConnections: this.o.maxConnectionsPerSandbox };
        let server: Server;
        if (passed === undefined) {
          server = await this.o.listen(netns.path, { ...at, expectNs: netns.ns });
        } else {
          const fd = passed;
          passed = undefined;
          server = await serveInheritedListener(fd, at);
        }
        const entry: Attached = { ns: netns.ns, server, sandbox };
        server.on('connection', (socket: Socket) => proxy.handle(socket, entry.sandbox));
        server.on('error', (e) => this.o.log.debug(`sandbox ${ref}: egress listener: ${e.message}`));
        this.attached.set(ref, entry);
      } finally {
        if (passed !== undefined) closeSync(passed);
      }
    })();
    this.attaching.set(ref, work);
    try {
      await work;
    } finally {
      this.attaching.delete(ref);
    }
  }

  /**
   * Opens the shared listener on `host:port` (an address of this host the sandboxes reach).
   * Once per service; its port (port 0: the system's choice) is returned.
   */
  async listenShared(host: string, port: number): Promise<number> {
    if (this.shared !== undefined) return this.shared.port;
    const { SharedEgressListener } = await import('./shared-listener.js');
    this.shared = await SharedEgressListener.start(await this.proxyNow(), { host, port, maxConnectionsPerSandbox: this.o.maxConnectionsPerSandbox, log: this.o.log });
    return this.shared.port;
  }

  /** Serves sandbox `ref` on the shared listener under `credential` (again: only the context is replaced). */
  register(ref: string, credential: ProxyCredential, sandbox: EgressSandbox): void {
    if (this.shared === undefined) throw new Error('berth egress has no shared listener (listenShared)');
    this.shared.register(ref, credential, sandbox);
  }

  /** Stops listening for sandbox `ref` and ends its connections (the sandbox is going). */
  async detach(ref: string): Promise<void> {
    const registered = this.shared?.unregister(ref);
    if (registered !== undefined && this.proxy !== undefined) (await this.proxy.catch(() => undefined))?.release(registered);
    const a = this.attached.get(ref);
    if (a === undefined) return;
    this.attached.delete(ref);
    await new Promise<void>((resolve) => a.server.close(() => resolve()));
    if (this.proxy !== undefined) (await this.proxy.catch(() => undefined))?.release(a.sandbox);
  }

  /** Sandbox `ref`'s listening socket here (its descriptor) and the namespace it listens in; undefined when it has none or Node gives no descriptor. */
  listenerOf(ref: string): { fd: number; ns: string } | undefined {
    const a = this.attached.get(ref);
    const fd = a === undefined ? undefined : listeningFd(a.server);
    return a === undefined || fd === undefined ? undefined : { fd, ns: a.ns };
  }

  /**
   * Stops accepting connections for sandbox `ref` here (another process serves its socket now);
   * those open go on until `detach`.
   */
  stopAccepting(ref: string): void {
    this.attached.get(ref)?.server.close();
  }

  /** How many sandboxes have a listener. */
  get size(): number {
    return this.attached.size;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.attaching.values()].map((p) => p.catch(() => undefined)));
    await Promise.all([...this.attached.keys()].map((ref) => this.detach(ref)));
    await this.shared?.close();
    if (this.proxy !== undefined) await (await this.proxy.catch(() => undefined))?.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Where the installation's egress files live. */
export function egressDir(berthHome: string): string {
  return join(berthHome, 'egress');
}
