import { BerthError } from '../../errors.js';
import { isAccountName } from './account-name.js';
import { endpointOf } from './errors.js';

/** What a recorded ssh sandbox ref names: the login and host, the account and its home root. */
export interface SshRef {
  user: string;
  host: string;
  port: number;
  account: string;
  homeRoot: string;
}

const REF = /^ssh:\/\/([a-z_][a-z0-9_-]*)@(\[[0-9A-Fa-f:.%]+\]|[^:/@\s[\]]+):([0-9]{1,5})((?:\/[A-Za-z0-9._-]+)+)\/(berth-[0-9a-f]{24})$/;

/**
 * The state store's ref of a sandbox account: `ssh://root@build1:22/home/berth/berth-<24 hex>`
 * (the account's home on that host). It names the host, so `remove` after a restart reaches the
 * right one, and nothing secret.
 */
export function formatRef(r: SshRef): string {
  return `ssh://${r.user}@${endpointOf(r.host, r.port)}${r.homeRoot}/${r.account}`;
}

/** The parts of a ref `formatRef` made; anything else is refused (a tampered or foreign record). */
export function parseRef(ref: string): SshRef {
  const m = REF.exec(ref);
  const port = Number(m?.[3]);
  const dotSegment = (m?.[4] ?? '').split('/').some((seg) => seg === '.' || seg === '..');
  if (m === null || dotSegment || !(port >= 1 && port <= 65_535) || !isAccountName(m[5] ?? '')) {
    throw new BerthError('invalid_ref', `"${ref}" is not an ssh sandbox ref (ssh://user@host:port/home-root/berth-<24 hex>); is the state store from another backend?`);
  }
  const host = (m[2] as string).replace(/^\[(.*)\]$/, '$1');
  return { user: m[1] as string, host, port, homeRoot: m[4] as string, account: m[5] as string };
}
