import { homedir } from 'node:os';
import { join } from 'node:path';
import * as z from 'zod';
import { absolutePath, bool, integer } from '../../config/zod-kit.js';
import { mergeWritten, type SettingsSection } from '../../config/section.js';
import { DEFAULT_HOME_ROOT } from './accounts.js';
import { endpointOf } from './errors.js';
import { DEFAULT_TMP_SIZE_MB } from './spawn.js';
import { DEFAULT_POOL_SETTINGS, type PoolSettings, type SshTarget } from './target.js';

/*
 * The `ssh:` config section (top level and per profile): which host, how to log in and trust it,
 * and how the connections behave. Every key optional; the defaults and the merge are here, the
 * rules across keys (a host, one way to authenticate) in `problems`.
 */

/** A profile's ssh settings, merged. */
export interface SshSettings {
  /** The host's name or address; required when a profile uses backend ssh. */
  host: string | undefined;
  port: number;
  /** The login user; it must be root there (see accounts.ts). */
  user: string;
  /** Private key file; exactly one of it and `agent` when the backend is used. */
  identityFile: string | undefined;
  /** ssh-agent socket, for authentication only (never forwarded). */
  agent: string | undefined;
  /** known_hosts file the host key is checked against. */
  knownHosts: string;
  /** Record an unknown host key at the first connect instead of refusing it (a changed key is always refused). */
  trustOnFirstUse: boolean;
  /** 0 turns keepalives off. */
  keepaliveIntervalSeconds: number;
  keepaliveCountMax: number;
  /** Channels per connection: at most the host's sshd MaxSessions (10 by default; SFTP counts). */
  maxSessions: number;
  connectTimeoutSeconds: number;
  /** Where the sandbox accounts' homes live on the host. */
  homeRoot: string;
  /** RLIMIT_NPROC of each sandbox account (processes at once); undefined: no bound. */
  maxProcesses: number | undefined;
  /** Size of each of a sandbox's private /tmp, /var/tmp and /dev/shm (tmpfs: memory). */
  tmpSizeMb: number;
}

/** Host names and addresses (IPv6 without brackets): never an option-looking or spaced string. */
const HOST = /^(?!-)[A-Za-z0-9._:%-]{1,253}$/;
/** Login names as useradd accepts them. */
const USER = /^[a-z_][a-z0-9_-]{0,31}$/;
/** What a home root may be made of (accounts.ts refuses anything else on the host too). */
const HOME_ROOT = /^(\/[A-Za-z0-9._-]+)+$/;

const sshShape = {
  host: z.string({ error: 'a host name or address' }).regex(HOST, { error: 'a host name or address (letters, digits, ".", "-", ":"; no spaces)' }).optional(),
  port: integer(1, 65_535),
  user: z.string({ error: 'a login name' }).regex(USER, { error: 'a login name ([a-z_][a-z0-9_-]*)' }).optional(),
  identityFile: absolutePath('a private key file').optional(),
  agent: absolutePath('an ssh-agent socket').optional(),
  knownHosts: absolutePath('a known_hosts file').optional(),
  trustOnFirstUse: bool(),
  keepaliveIntervalSeconds: integer(0, 3600),
  keepaliveCountMax: integer(1, 100),
  maxSessions: integer(1, 1000),
  connectTimeoutSeconds: integer(1, 600),
  homeRoot: z
    .string({ error: 'an absolute directory' })
    .refine((p) => HOME_ROOT.test(p) && !p.split('/').includes('..') && !p.split('/').includes('.'), {
      error: 'an absolute directory other than / (letters, digits, ".", "_", "-"; no "." or ".." segments, no trailing /)',
    })
    .optional(),
  maxProcesses: integer(1, 9_999_999),
  tmpSizeMb: integer(1, 9_999_999),
};

/** The `ssh:` section of the config: its keys, defaults, merge and cross-key rules. */
export const sshSettings: SettingsSection<SshSettings, typeof sshShape> = {
  shape: sshShape,
  defaults: () => ({
    host: undefined,
    port: 22,
    user: 'root',
    identityFile: undefined,
    agent: undefined,
    knownHosts: join(homedir(), '.ssh', 'known_hosts'),
    trustOnFirstUse: false,
    keepaliveIntervalSeconds: DEFAULT_POOL_SETTINGS.keepaliveIntervalMs / 1000,
    keepaliveCountMax: DEFAULT_POOL_SETTINGS.keepaliveCountMax,
    maxSessions: DEFAULT_POOL_SETTINGS.maxSessions,
    connectTimeoutSeconds: DEFAULT_POOL_SETTINGS.connectTimeoutMs / 1000,
    homeRoot: DEFAULT_HOME_ROOT,
    maxProcesses: undefined,
    tmpSizeMb: DEFAULT_TMP_SIZE_MB,
  }),
  merge: (base, written) => {
    const merged = mergeWritten(base, written);
    // How to authenticate is one choice: a section that names either way replaces both.
    const namesAuth = written.identityFile !== undefined || written.agent !== undefined;
    return namesAuth ? { ...merged, identityFile: written.identityFile, agent: written.agent } : merged;
  },
  problems: (uses) => uses.flatMap((u) => sshProblems(u.settings, (name) => `${u.at}.${name}`)),
};

/** One place's problems: a host, and exactly one way to log in. `key` names a key of the section by its config path. */
function sshProblems(s: SshSettings, key: (name: string) => string): string[] {
  const out: string[] = [];
  if (s.host === undefined) {
    out.push(`config key "${key('host')}": backend ssh needs the host to run sandboxes on; set ${key('host')} to its name or address`);
  }
  if (s.identityFile !== undefined && s.agent !== undefined) {
    out.push(`config key "${key('agent')}": ${key('identityFile')} and ${key('agent')} are both set, and berth authenticates one way; remove one of them`);
  } else if (s.identityFile === undefined && s.agent === undefined) {
    out.push(
      `config key "${key('identityFile')}": backend ssh needs a way to log in; set ${key('identityFile')} to a private key file ` +
        `or ${key('agent')} to an ssh-agent socket (e.g. the value of SSH_AUTH_SOCK)`,
    );
  }
  return out;
}

/** Where and how to reach the host of `s` (its host set: the config rules require it). */
export function targetOf(s: SshSettings): SshTarget {
  return {
    host: s.host ?? '',
    port: s.port,
    user: s.user,
    identityFile: s.identityFile,
    agentSocket: s.agent,
    knownHostsFile: s.knownHosts,
    trustOnFirstUse: s.trustOnFirstUse,
  };
}

/** The connection pool's settings of `s`. */
export function poolSettingsOf(s: SshSettings): PoolSettings {
  return {
    keepaliveIntervalMs: s.keepaliveIntervalSeconds * 1000,
    keepaliveCountMax: s.keepaliveCountMax,
    maxSessions: s.maxSessions,
    connectTimeoutMs: s.connectTimeoutSeconds * 1000,
    idleCloseMs: DEFAULT_POOL_SETTINGS.idleCloseMs,
  };
}

/** `root@build1:22`, for explain and messages. */
export function describeHost(s: SshSettings): string {
  return s.host === undefined ? '(no ssh.host set)' : `${s.user}@${endpointOf(s.host, s.port)}`;
}
