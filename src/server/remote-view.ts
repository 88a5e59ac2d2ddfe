import type { SandboxInfo } from '../broker/broker.js';
import type { Binding } from '../broker/resolve-call.js';

/*
 * What remote callers (HTTP, MCP over HTTP) see of berth's answers: no host paths (docs/design.md §8).
 * A mount is a host dir, so it becomes a boolean; library and CLI callers keep the real path.
 */

export type RemoteBinding = Omit<Binding, 'mount'> & { mounted: boolean };

export function remoteBinding(b: Binding): RemoteBinding {
  const { mount, ...rest } = b;
  return { ...rest, mounted: mount !== null };
}

export type RemoteSandbox<S extends SandboxInfo> = Omit<S, 'mount'> & { mounted: boolean };

export function remoteSandbox<S extends SandboxInfo>(s: S): RemoteSandbox<S> {
  const { mount, ...rest } = s;
  return { ...rest, mounted: mount !== null };
}
