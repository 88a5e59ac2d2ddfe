import { isAbsolute } from 'node:path';
import { checkCredentials } from '../egress/credentials.js';
import type { BackendTraitsTable } from './backend-traits.js';
import type { RawCore, RawProfile } from './core-schema.js';
import type { CoreSettings, EgressProxySettings, ServerSettings } from './types.js';

/*
 * Cross-field rules of berth's own keys: settings that contradict each other or would be inert are
 * errors that name the key and the fix. Rules about backends read their traits (does it mount host
 * dirs, does it key like a container), never their names. The rules of the modules' own sections
 * are setup/'s (section-rules.ts).
 */

/** The top level or one profile section, with what was written there and the merged result. */
export interface Section<S extends CoreSettings = CoreSettings> {
  /** `undefined` for the top level. */
  profile: string | undefined;
  /** What this section itself wrote. */
  written: RawProfile;
  settings: S;
}

/** The config path of `key` in `section` (`sharedKey`, `profiles.bot.sharedKey`). */
export function keyOf(section: Section, key: string): string {
  return section.profile === undefined ? key : `profiles.${section.profile}.${key}`;
}

/**
 * For a profile, a rule fires only when the profile wrote one of the keys involved; otherwise
 * the same values are the top level's and the top-level check already reports them.
 */
function involves(section: Section, keys: readonly (keyof RawCore)[]): boolean {
  return section.profile === undefined || keys.some((k) => section.written[k] !== undefined);
}

/** `a`, `a and b`, `a, b and c`. */
function joined(names: readonly string[], word: 'and' | 'or'): string {
  return names.length <= 1 ? (names[0] ?? '') : `${names.slice(0, -1).join(', ')} ${word} ${names.at(-1)!}`;
}

function sharedKeyProblems(section: Section, backends: BackendTraitsTable): string[] {
  const { settings, written } = section;
  const at = keyOf(section, 'sharedKey');
  if (settings.scope === 'shared') {
    if (settings.sharedKey !== undefined || !involves(section, ['scope', 'sharedKey'])) return [];
    return [
      `config key "${at}": scope "shared" needs a non-empty sharedKey; set ${at} to a name for the shared sandbox, or choose another scope`,
    ];
  }
  if (settings.sharedKey === undefined) return [];
  if (!involves(section, ['scope', 'sharedKey', 'backend', 'persistent'])) return [];
  // A key inherited from the top level can be unset for this profile alone with "".
  const inherited = section.profile !== undefined && written.sharedKey === undefined;
  const what = inherited ? `sharedKey (set at the top level)` : 'sharedKey';
  const remedy = inherited ? `set ${at}: "" to unset it for this profile` : 'remove sharedKey';
  const scopeKey = keyOf(section, 'scope');
  if (settings.scope === 'auto') {
    const containerLike = backends.traits(settings.backend).containerKeying;
    if (containerLike && settings.persistent) return [];
    const reason = containerLike ? 'persistent is false' : `backend "${settings.backend}" is not a container backend`;
    const which = joined(backends.namesWhere((t) => t.containerKeying), 'or');
    return [
      `config key "${at}": in scope "auto" ${what} only applies to a persistent container backend (${which} with persistent: true), and here ${reason}, so it would have no effect; ${remedy}, or set ${scopeKey}: shared to share one sandbox on any backend`,
    ];
  }
  return [
    `config key "${at}": scope "${settings.scope}" never uses ${what}, so it would have no effect; ${remedy}, or set ${scopeKey}: shared (or auto) to share a sandbox`,
  ];
}

function userSandboxProblems(section: Section): string[] {
  // Only a value written in this section: one inherited from the top level is meaningful
  // there (top-level scope auto), and a profile has no way to unset it.
  if (section.written.userSandbox === undefined || section.settings.scope === 'auto') return [];
  const at = keyOf(section, 'userSandbox');
  return [
    `config key "${at}": userSandbox only applies in scope "auto" (here scope is "${section.settings.scope}"), so it would have no effect; remove it or set ${keyOf(section, 'scope')}: auto`,
  ];
}

function warmPoolProblems(section: Section): string[] {
  const { settings } = section;
  if (settings.warmPool.size === 0 || !involves(section, ['warmPool', 'persistent', 'scope'])) return [];
  const at = keyOf(section, 'warmPool.size');
  if (settings.persistent) {
    return [`config key "${at}": a warm pool serves only ephemeral sandboxes, and persistent is true here, so it would never be used; set ${keyOf(section, 'persistent')}: false or remove warmPool`];
  }
  if (settings.scope === 'shared') {
    return [`config key "${at}": scope "shared" has one sandbox that never comes from a warm pool; remove warmPool or choose another scope`];
  }
  return [];
}

function secretsFileProblems(section: Section): string[] {
  const written = section.written.env?.secretsFile;
  if (written === undefined || isAbsolute(written) || section.settings.env.secretsFile !== written) return [];
  // Still relative after merging: there is no config file to be relative to.
  return [
    `config key "${keyOf(section, 'env.secretsFile')}": "${written}" is a relative path and this config comes from no file; use an absolute path`,
  ];
}

function envProblems(section: Section): string[] {
  const wroteEnv = section.written.env?.static !== undefined || section.written.env?.forward !== undefined;
  if (section.profile !== undefined && !wroteEnv) return [];
  const { static: literal, forward } = section.settings.env;
  const at = keyOf(section, 'env.forward');
  return forward
    .filter((name) => Object.hasOwn(literal, name))
    .map(
      (name) =>
        `config key "${at}": "${name}" is also in env.static; a variable is either a literal (env.static) or forwarded from berth's environment (env.forward), not both; remove it from one of them`,
    );
}

/**
 * `egress:` and `credentials:` of one place: credentials checked against the place's policy (a
 * profile may inherit either), a credential that would also enter the sandbox as a plain variable,
 * a mode the backend cannot enforce, and a warm pool (its sandboxes are made before their profile's
 * egress is known).
 */
function egressProblems(section: Section, top: Section, backends: BackendTraitsTable): string[] {
  const { settings } = section;
  const wroteCredentials = section.written.credentials ?? (section.profile === undefined ? undefined : top.written.credentials);
  if (!involves(section, ['egress', 'credentials', 'backend', 'env', 'warmPool'])) return [];
  const problems: string[] = [];
  const checked = checkCredentials(wroteCredentials, settings.egress, keyOf(section, 'credentials'));
  if (!checked.ok) problems.push(...checked.issues.map((i) => `config key "${i.path}": ${i.message}`));
  const forwarded = new Set(settings.env.forward);
  for (const c of settings.credentials) {
    if (forwarded.has(c.name) || Object.hasOwn(settings.env.static, c.name)) {
      problems.push(
        `config key "${keyOf(section, `credentials.${c.name}`)}": "${c.name}" is also a plain variable (env.forward or env.static), which would put a value in the sandbox ` +
          'beside the placeholder; remove it from env',
      );
    } else if (forwarded.has(c.from)) {
      problems.push(
        `config key "${keyOf(section, `credentials.${c.name}`)}": its value comes from "${c.from}", which env.forward also forwards into the sandbox, so the real value ` +
          `would be there anyway; remove "${c.from}" from env.forward`,
      );
    }
  }
  const modes = backends.traits(settings.backend).egressModes ?? ['open'];
  const mode = settings.egress.mode;
  if (!modes.includes(mode)) {
    const can = joined(backends.namesWhere((t) => (t.egressModes ?? ['open']).includes(mode)), 'or');
    problems.push(
      `config key "${keyOf(section, 'egress.mode')}": backend "${settings.backend}" cannot enforce egress mode ${mode} (its sandboxes' network is not berth's to confine); ` +
        `use backend: ${can}, or another mode`,
    );
  } else if (settings.credentials.length > 0 && !modes.includes('allowlist')) {
    const can = joined(backends.namesWhere((t) => (t.egressModes ?? []).includes('allowlist')), 'or');
    problems.push(
      `config key "${keyOf(section, 'credentials')}": backend "${settings.backend}" cannot put berth's egress proxy in front of its sandboxes, and a credential's value ` +
        `reaches its hosts only through it; use backend: ${can}, or env.forward (the value then enters the sandbox)`,
    );
  }
  if (settings.warmPool.size > 0 && (mode !== 'open' || settings.credentials.length > 0)) {
    problems.push(
      `config key "${keyOf(section, 'warmPool.size')}": a warm pool's sandboxes are made before a call, with an open network and no credentials, so they cannot serve ` +
        `egress mode ${mode}${settings.credentials.length > 0 ? ' with credentials' : ''}; remove warmPool for this profile`,
    );
  }
  return problems;
}

/**
 * `workspace.mount` where no profile it applies to uses a backend that mounts host dirs. A
 * top-level value applies to the top level (profiles without a section) and to every profile that
 * does not override it.
 */
function mountProblems(top: Section, profiles: readonly Section[], backends: BackendTraitsTable): string[] {
  const problems: string[] = [];
  const mounts = (s: Section): boolean => backends.traits(s.settings.backend).mountsHostDirs;
  const never = `${joined(backends.namesWhere((t) => !t.mountsHostDirs), 'and')} never mount`;
  const use = `use backend: ${joined(backends.namesWhere((t) => t.mountsHostDirs), 'or')}`;
  if (top.written.workspace?.mount === true) {
    const appliesTo = [top, ...profiles.filter((p) => p.written.workspace?.mount === undefined)];
    if (!appliesTo.some(mounts)) {
      problems.push(`config key "workspace.mount": ${never}, and no profile it applies to uses a container backend; remove workspace.mount or ${use}`);
    }
  }
  for (const p of profiles) {
    if (p.written.workspace?.mount === true && !mounts(p)) {
      problems.push(`config key "${keyOf(p, 'workspace.mount')}": profile "${p.profile}" uses backend "${p.settings.backend}", and ${never}; remove workspace.mount or ${use}`);
    }
  }
  return problems;
}

/** Every cross-field problem of a config, in a stable order (per section, then across sections). */
export function crossFieldProblems(top: Section, profiles: readonly Section[], backends: BackendTraitsTable): string[] {
  const problems: string[] = [];
  for (const s of [top, ...profiles]) {
    problems.push(
      ...sharedKeyProblems(s, backends), ...userSandboxProblems(s), ...envProblems(s), ...secretsFileProblems(s), ...warmPoolProblems(s),
      ...egressProblems(s, top, backends),
    );
  }
  problems.push(...mountProblems(top, profiles, backends));
  return problems;
}

/** `server:` settings that contradict each other (a top-level section: no profile repeats it). */
export function serverProblems(server: ServerSettings): string[] {
  if (server.maxConnectionsPerAddress <= server.maxConnections) return [];
  return [
    `config key "server.maxConnectionsPerAddress": ${server.maxConnectionsPerAddress} is more than server.maxConnections (${server.maxConnections}), ` +
      'so it would have no effect; lower it, or raise server.maxConnections',
  ];
}

/**
 * The shared listener (`egressProxy.listen` and `advertise`): both or neither, and both where a
 * place puts the proxy in front of sandboxes that reach it shared (kubernetes pods): without an
 * address they reach, their egress could not be honoured. Checked over the top level and every profile.
 */
export function sharedProxyProblems(places: readonly Section[], proxy: EgressProxySettings, backends: BackendTraitsTable): string[] {
  if ((proxy.listen === undefined) !== (proxy.advertise === undefined)) {
    const [set, unset] = proxy.listen === undefined ? ['advertise', 'listen'] : ['listen', 'advertise'];
    return [`config key "egressProxy.${set}" is set and egressProxy.${unset} is not: the shared listener needs where it listens (listen) and where sandboxes reach it (advertise); set both or neither`];
  }
  if (proxy.listen !== undefined) return [];
  // The proxy serves a place in allowlist mode, or with credentials in any mode.
  const needing = places.find((p) => backends.traits(p.settings.backend).egressProxyReach === 'shared' &&
    (p.settings.egress.mode === 'allowlist' || p.settings.credentials.length > 0));
  if (needing === undefined) return [];
  return [
    `config key "${keyOf(needing, needing.settings.egress.mode === 'allowlist' ? 'egress.mode' : 'credentials')}": backend "${needing.settings.backend}" runs its sandboxes where berth cannot ` +
      'put a proxy listener of their own, so they reach one shared listener; set egressProxy.listen (an IP:port of this host) and egressProxy.advertise ' +
      '(the IP:port the sandboxes reach it at: this host\'s address as they see it)',
  ];
}
