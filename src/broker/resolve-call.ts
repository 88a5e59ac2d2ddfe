import { EGRESS_CA_BUNDLE, EGRESS_CA_CERT, type SandboxSpec } from '../backends/backend.js';
import type { EgressCredential } from '../egress/credentials.js';
import { EGRESS_PROXY_PORT } from '../egress/netns-listener.js';
import { policyView, type EgressMode, type EgressPolicy } from '../egress/policy.js';
import type { ProxyAddress } from '../egress/proxy-address.js';
import { proxyCredential, proxyUrl, type ProxyCredential } from '../egress/proxy-credential.js';
import { egressEnv, egressRedactValues } from '../egress/sandbox-setup.js';
import { resolveCredentialGrants } from '../policy/credential-grants.js';
import { isolationNoteOf, sectionOf } from '../backends/module.js';
import type { BackendTraits, Isolation } from '../config/backend-traits.js';
import type { SecretsFile } from '../policy/secrets-file.js';
import type { BerthConfig, ProfileSettings } from '../setup/berth-config.js';
import { settingsFor } from '../config/types.js';
import { ConfigError, UsageError } from '../errors.js';
import { resolveEnvGrants, type EnvGrants } from '../policy/env-grants.js';
import { hostMountFs, resolveMount, type MountDecision } from '../policy/mount.js';
import { wouldCreateCycle } from '../scope/aliases.js';
import type { AttachedWorkspace, CallScope } from '../scope/call-scope.js';
import { identityDigest, sandboxDirName, sandboxIdentity, shellIdentity } from '../scope/naming.js';
import { resolveSandboxKey } from '../scope/sandbox-key.js';
import { startCwd } from './start-cwd.js';
import type { ScopeRecords } from './state/scope-records.js';
import type { StateStore } from './state/state-store.js';
import { overriddenSettings, overrideIsolates, readTaskOverride } from './task-override.js';

export type { Isolation } from '../config/backend-traits.js';

/** What `explain` shows: the resolved answer for a call. Never contains an env value. */
export interface Binding {
  /** The backend module's name (`docker`). */
  backend: string;
  /** How the backend isolates commands; `none`: not at all (see `note`). */
  isolation: Isolation;
  /** Set when the backend says how its isolation falls short: where the commands really run and as whom. */
  note?: string;
  /** Where the sandbox runs when that is another machine (an SSH backend's `root@build1:22`). */
  host?: string;
  /**
   * How a timeout (or a caller gone away, or a job's kill) ends a command's processes: `cgroup`,
   * the kernel's grouping (a cgroup per command that nothing the command does gets out of); `tags`,
   * the tags berth puts in their environment, their session and process group (a process that
   * clears its environment and leaves its session is not found).
   */
  kill: 'cgroup' | 'tags';
  tenant: string;
  profile: string;
  sandboxKey: string;
  rule: string;
  persistent: boolean;
  mount: string | null;
  mountReason: string;
  cwd: string;
  envNames: string[];
  envMissing: string[];
  /**
   * What the sandbox's network may reach (`egress:`), and its credentials: each name the sandbox
   * holds a placeholder under, and the hosts its value goes to. Never a value or a placeholder.
   */
  egress: {
    mode: EgressMode;
    allow?: unknown[];
    deny?: unknown[];
    hosts?: Record<string, string[]>;
    /** berth's proxy serves the sandbox (allowlist, or credentials in any mode). */
    proxy: boolean;
    credentials: { name: string; hosts: string[] }[];
  };
  /** What idleness does to the sandbox (docs/design.md §6), and whether it hibernates now. */
  lifecycle: {
    /** An ephemeral sandbox is removed; a persistent one hibernated, or kept running (`never`: hibernateSeconds 0). */
    whenIdle: 'removed' | 'hibernated' | 'never';
    /** After how many seconds without a call, command or job (0 with `never`). */
    afterSeconds: number;
    /** When the store records the sandbox hibernated (ms since the epoch): the next call resumes it. `explain` only. */
    hibernatedMs?: number;
  };
}

/** Everything the broker needs to run a call; `binding` is its public face. */
export interface ResolvedCall {
  binding: Binding;
  scope: CallScope;
  settings: ProfileSettings;
  /** What the call's backend does (mounts host dirs, isolates, keys like a container, ...). */
  traits: Readonly<BackendTraits>;
  spec: SandboxSpec;
  /** Shared sandbox (`default`, `profile:*`, `shared:*`). */
  shared: boolean;
  shell: { id: string; digest: string; fileStem: string };
  /** The task is a registered subagent (it has its own shell in its parent's sandbox). */
  isSubagent: boolean;
  /** The session the call belongs to (or a stand-in naming its task/user) for lifecycle links. */
  sessionRef: string;
  /** The sandbox's default directory for this call (an attached workspace on `local`). */
  defaultCwd: string;
  env: Record<string, string>;
  secretNames: string[];
  redactValues: string[];
  /**
   * The proxy's view of the sandbox (policy and credentials with their values), when the proxy
   * serves it; with the credential it names itself by on the shared listener, when it reaches that.
   */
  egress?: { policy: EgressPolicy; credentials: readonly EgressCredential[]; proxyCredential?: ProxyCredential } | undefined;
}

/** What the egress proxy needs of every call it serves: read once, when a profile uses it. */
export interface EgressFiles {
  /** The installation's placeholder secret. */
  secret: Buffer;
  /** berth's CA (PEM) and the bundle sandboxes trust (the host's system bundle with it appended). */
  caPem: string;
  bundlePem: string;
  /** Where sandboxes reach the shared listener (`egressProxy.advertise`), when it is configured. */
  sharedProxy?: ProxyAddress | undefined;
}

export interface ResolveContext {
  config: BerthConfig;
  /** The installation (its id keys sandboxes) and what it remembers of scopes. */
  store: Pick<StateStore, 'installationId' | 'scopes'>;
  berthHome: string;
  homeDir: string;
  dockerSockets: string[];
  hostEnv: Readonly<Record<string, string | undefined>>;
  /** Secrets files (`env.secretsFile`) read at start-up, by absolute path. */
  secrets?: ReadonlyMap<string, SecretsFile>;
  /**
   * What this host offers the kernel's grouping, read once at start-up: berth may group processes
   * here (`host`), and the docker engine is this host's (`engineOnHost`). Absent: tags everywhere.
   */
  grouping?: { host: boolean; engineOnHost: boolean };
  /** The egress proxy's files, when some profile uses the proxy (allowlist or credentials). */
  egress?: EgressFiles | undefined;
}

/** `grants` without the variables in `names` (their values stay in the redaction list). */
function withoutNames(grants: EnvGrants, names: ReadonlySet<string>): EnvGrants {
  if (names.size === 0 || !grants.names.some((n) => names.has(n))) return grants;
  return {
    ...grants,
    env: Object.fromEntries(Object.entries(grants.env).filter(([n]) => !names.has(n))),
    names: grants.names.filter((n) => !names.has(n)),
    secretNames: grants.secretNames.filter((n) => !names.has(n)),
  };
}

/** Whether berth's egress proxy serves `settings`' sandboxes. */
export function usesEgressProxy(settings: Pick<ProfileSettings, 'egress' | 'credentials'>): boolean {
  return settings.egress.mode === 'allowlist' || settings.credentials.length > 0;
}

/**
 * What becomes of an attached workspace on a backend that neither mounts host dirs nor runs on
 * this host (a remote one): nothing; the call runs in the sandbox's default dir.
 */
function unusedWorkspace(backend: string, workspace: AttachedWorkspace | undefined): MountDecision {
  if (workspace === undefined) return { mount: null, mountReason: 'no workspace attached', startDir: undefined };
  const what = workspace.source === 'process' ? 'the process working directory' : 'the attached workspace';
  return { mount: null, mountReason: `backend "${backend}" neither mounts host dirs nor runs on this host, so ${what} is not used`, startDir: undefined };
}

/** Registers `task -> parentTask` (the `--parent` flag); refuses an alias that would close a cycle. */
export function registerAlias(scopes: Pick<ScopeRecords, 'aliasParent' | 'putAlias'>, scope: CallScope): void {
  if (scope.task === undefined || scope.parentTask === undefined) return;
  const parentOf = (child: string) => scopes.aliasParent(scope.tenant, scope.profile, child);
  if (parentOf(scope.task) === scope.parentTask) return;
  if (scope.task === scope.parentTask || wouldCreateCycle(scope.task, scope.parentTask, parentOf)) {
    throw new UsageError(`task "${scope.task}" cannot be a subagent of "${scope.parentTask}": that alias would close a cycle; pick the real parent task`);
  }
  scopes.putAlias(scope.tenant, scope.profile, scope.task, scope.parentTask, scope.session ?? null);
}

export function sessionRefOf(scope: CallScope): string {
  if (scope.session !== undefined) return scope.session;
  if (scope.task !== undefined) return `@task:${scope.task}`;
  if (scope.user !== undefined) return `@user:${scope.user}`;
  return '@default';
}

/**
 * Resolves a normalised call scope to its binding. Pure policy over the config and the store's
 * records (aliases, overrides, cwd records): it contacts no engine.
 */
export function resolveCall(ctx: ResolveContext, scope: CallScope, opts: { withCwd: boolean } = { withCwd: true }): ResolvedCall {
  const { config, store } = ctx;
  const base = settingsFor(config, scope.profile);
  const override = readTaskOverride(store.scopes, scope);
  const settings = override?.backend !== undefined || override?.image !== undefined ? overriddenSettings(config, base, scope, override) : base;
  const module = config.backends.module(settings.backend);
  const traits = module.traits;
  const parentOf = (child: string) => store.scopes.aliasParent(scope.tenant, scope.profile, child);
  const keyed = resolveSandboxKey({
    scope, settings, containerKeying: traits.containerKeying, multiProfile: config.multiProfile, parentOf, taskOverrideIsolates: overrideIsolates(override),
  });
  const identity = sandboxIdentity(store.installationId, scope.tenant, scope.profile, keyed.key);
  const digest = identityDigest(identity);
  const dirName = sandboxDirName(identity);

  const workspace = scope.workspace
    ?? (override?.cwd !== undefined ? { path: override.cwd, source: override.cwdSource ?? 'session' } : undefined);
  const mount = !traits.mountsHostDirs && !traits.hostPaths ? unusedWorkspace(settings.backend, workspace)
    : resolveMount({
      key: keyed.key, shared: keyed.shared, workspace, mountEnabled: settings.workspace.mount, containerBackend: traits.mountsHostDirs,
      homeDir: ctx.homeDir, stateDir: ctx.berthHome, dockerSockets: ctx.dockerSockets, allowedRoots: settings.workspace.allowedRoots, fs: hostMountFs,
    });

  const isSubagent = scope.task !== undefined && parentOf(scope.task) !== undefined;
  const shell = shellIdentity(scope, isSubagent);
  const defaultCwd = mount.startDir ?? module.defaultCwd({ berthHome: ctx.berthHome, dirName, digest, settings: sectionOf(module, settings) });

  const secretsPath = settings.env.secretsFile;
  const secrets = secretsPath === undefined ? undefined : ctx.secrets?.get(secretsPath);
  if (secretsPath !== undefined && secrets === undefined) {
    throw new ConfigError(`secrets file ${secretsPath} (env.secretsFile) was not read at start-up; open the broker with this config`);
  }
  // A user's own values go only into that user's own sandbox (auto row 3 or scope: user). In a
  // sandbox other users can reach (a task, session, profile or shared key) they are withheld, and
  // listed as missing, since every shell in a sandbox can read every other's /proc/*/environ.
  const ownUserSandbox = scope.user !== undefined && (keyed.rule === 'auto:3' || keyed.rule === 'user');
  const grantInput = { env: settings.env, tenant: scope.tenant, user: scope.user, hostEnv: ctx.hostEnv, secrets, deliverUserValues: ownUserSandbox };
  // A credential's value goes to the proxy only: a plain grant under its name or its source (a
  // forward pattern, a secrets-file value, the user's own variable) never reaches the sandbox.
  const grants = withoutNames(resolveEnvGrants(grantInput), new Set(settings.credentials.flatMap((c) => [c.name, c.from])));
  const proxied = usesEgressProxy(settings);
  if (proxied && ctx.egress === undefined) throw new Error(`profile "${scope.profile}" uses berth's egress proxy, which this broker did not prepare`);
  const creds = proxied ? resolveCredentialGrants(settings.credentials, grantInput, ctx.egress!.secret, digest) : undefined;
  const shared = proxied && traits.egressProxyReach === 'shared' ? sharedProxyOf(ctx.egress!, digest) : undefined;
  const env = creds === undefined ? grants.env
    : { ...grants.env, ...egressEnv(shared?.url ?? EGRESS_PROXY_PORT, { bundle: EGRESS_CA_BUNDLE, berthCa: EGRESS_CA_CERT }, creds.credentials) };
  // The proxy token is no secret of anything upstream, but it is this sandbox's name on the shared listener: never shown.
  const redactValues = creds === undefined ? grants.redactValues
    : [...new Set([...grants.redactValues, ...egressRedactValues(creds.credentials), ...(shared === undefined ? [] : [shared.credential.token])])]
      .sort((a, b) => b.length - a.length || (a < b ? -1 : a > b ? 1 : 0));
  const spec: SandboxSpec = {
    identity, digest, dirName, ephemeral: keyed.ephemeral, mount: mount.mount, rule: keyed.rule, section: sectionOf(module, settings),
    egress: {
      mode: settings.egress.mode,
      ...(proxied ? { ca: { bundlePem: ctx.egress!.bundlePem, caPem: ctx.egress!.caPem } } : {}),
      ...(shared === undefined ? {} : { sharedProxy: shared.address }),
    },
  };
  const note = isolationNoteOf(module, settings);
  const host = module.host?.(sectionOf(module, settings));
  const kill = module.processGroups === 'remote'
    || (ctx.grouping?.host === true && (module.processGroups === 'host' || (module.processGroups === 'engine' && ctx.grouping.engineOnHost)))
    ? 'cgroup' : 'tags';
  return {
    binding: {
      backend: settings.backend, isolation: traits.isolation, ...(note === undefined ? {} : { note }), ...(host === undefined ? {} : { host }), kill, tenant: scope.tenant, profile: scope.profile, sandboxKey: keyed.key, rule: keyed.rule,
      persistent: !keyed.ephemeral, mount: mount.mount, mountReason: mount.mountReason,
      // Only a new shell needs the start cwd; exec asks for it then (startCwd), explain always.
      cwd: opts.withCwd ? startCwd(store.scopes, { scope, settings, traits, spec, shell, isSubagent, defaultCwd }) : '',
      envNames: [...grants.names, ...Object.keys(creds?.env ?? {})].sort(),
      envMissing: [...grants.missing, ...grants.withheld, ...(creds?.missing ?? []), ...(creds?.withheld ?? [])].sort(),
      egress: {
        ...policyView(settings.egress), proxy: proxied,
        credentials: (creds?.credentials ?? []).map((c) => ({ name: c.name, hosts: [...c.hosts] })),
      },
      lifecycle: lifecycleOf(keyed.ephemeral, settings.lifecycle),
    },
    scope, settings, traits, spec, shared: keyed.shared, shell, isSubagent, sessionRef: sessionRefOf(scope), defaultCwd,
    env, secretNames: grants.secretNames, redactValues,
    ...(creds === undefined ? {} : {
      egress: { policy: settings.egress, credentials: creds.credentials, ...(shared === undefined ? {} : { proxyCredential: shared.credential }) },
    }),
  };
}

/** A sandbox's way to the shared listener: the address, its credential, and the proxy URL holding both. */
function sharedProxyOf(files: EgressFiles, digest: string): { address: ProxyAddress; credential: ProxyCredential; url: string } {
  if (files.sharedProxy === undefined) throw new Error('a profile\'s sandboxes reach berth\'s egress proxy shared, and egressProxy.advertise is not set');
  const credential = proxyCredential(files.secret, digest);
  return { address: files.sharedProxy, credential, url: proxyUrl(credential, files.sharedProxy.authority) };
}

/** What idleness does to a sandbox of these settings (`Binding.lifecycle`, without the store's word). */
function lifecycleOf(ephemeral: boolean, l: { idleSeconds: number; hibernateSeconds: number }): Binding['lifecycle'] {
  if (ephemeral) return { whenIdle: 'removed', afterSeconds: l.idleSeconds };
  return l.hibernateSeconds === 0 ? { whenIdle: 'never', afterSeconds: 0 } : { whenIdle: 'hibernated', afterSeconds: l.hibernateSeconds };
}
