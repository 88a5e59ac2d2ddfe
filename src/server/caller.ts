import type { Broker } from '../broker/broker.js';
import { settingsFor } from '../config/types.js';
import type { BerthConfig } from '../setup/berth-config.js';
import { BerthError, ConfigError } from '../errors.js';
import type { CallScope, CallToken } from '../scope/call-scope.js';

/*
 * What a remote caller may choose (docs/design.md §8). Its credentials (a bearer token) fix its tenant
 * and the profiles it may name; the rest of the call scope (session, task, user) it may assert
 * freely inside those. A host backend (`local`: no isolation, berth's own user) is for remote
 * callers only when the operator said so (`server.allowHostBackend`).
 */

/** A remote caller: the tenant and the profiles its credentials allow, and the token they are (for the audit). */
export interface Caller {
  tenant: string;
  profiles: readonly string[];
  token?: CallToken;
}

/** A remote caller named a profile its token does not carry. HTTP 403. */
export class ProfileForbiddenError extends BerthError {
  constructor(message: string) {
    super('profile_forbidden', message);
  }
}

/** A remote call would run on the host while the operator has not allowed that. HTTP 403. */
export class HostBackendForbiddenError extends BerthError {
  constructor(message: string) {
    super('host_backend_forbidden', message);
  }
}

/** @throws ProfileForbiddenError when `profile` (the call's, `default` when it named none) is not the caller's. */
export function assertProfileAllowed(caller: Caller, profile: string): void {
  if (caller.profiles.includes(profile)) return;
  throw new ProfileForbiddenError(
    `profile "${profile}" is not allowed for this token; it may use only: ${caller.profiles.join(', ')} ` +
    `(a request that names no profile uses "default"; ask the operator for a token with --profile ${profile})`);
}

/** Whether a backend runs sandboxes on the host itself (its module says it isolates nothing). */
export function runsOnHost(config: BerthConfig, backend: string): boolean {
  return config.backends.traits(backend).isolation === 'none';
}

/** Whether any profile of the config runs on the host. */
function configRunsOnHost(config: BerthConfig): boolean {
  return runsOnHost(config, config.base.backend) || Object.values(config.profiles).some((p) => runsOnHost(config, p.backend));
}

/**
 * Refuses a remote call whose binding runs on the host, unless `server.allowHostBackend`. A task
 * override can name `local` only for a profile that already runs there (resolve-call), so a
 * config with no local profile needs no resolution here.
 *
 * @throws HostBackendForbiddenError, or what resolving the scope throws.
 */
export function assertNotOnHost(broker: Broker, scope: CallScope): void {
  if (broker.config.server.allowHostBackend || !configRunsOnHost(broker.config)) return;
  const binding = broker.explain(scope);
  if (runsOnHost(broker.config, binding.backend)) throw hostBackendForbidden(binding.profile);
}

export function hostBackendForbidden(profile: string): HostBackendForbiddenError {
  return new HostBackendForbiddenError(
    `profile "${profile}" runs on the host (backend local, no isolation): remote callers may not use it ` +
    'unless the operator sets server.allowHostBackend: true in the config');
}

/** A profile that runs on the host, and the tokens that may use it. */
export interface HostExposure {
  profile: string;
  tokenIds: string[];
}

/** Which tokens may use which profiles that run on the host (a token's `default` counts too). */
function hostExposure(config: BerthConfig, tokens: readonly { id: string; profiles: readonly string[] }[]): HostExposure[] {
  const byProfile = new Map<string, string[]>();
  for (const t of tokens) {
    for (const p of t.profiles) {
      if (!runsOnHost(config, settingsFor(config, p).backend)) continue;
      byProfile.set(p, [...(byProfile.get(p) ?? []), t.id]);
    }
  }
  return [...byProfile].map(([profile, tokenIds]) => ({ profile, tokenIds }));
}

/**
 * Start-up rule of `berth serve`: no token may reach a host profile unless the operator opted in.
 * Returns the exposure the operator accepted (to warn about), or throws one line naming the
 * profiles, the tokens and the fixes.
 */
export function assertHostExposureAllowed(config: BerthConfig, tokens: readonly { id: string; profiles: readonly string[] }[]): HostExposure[] {
  const exposed = hostExposure(config, tokens);
  if (exposed.length === 0 || config.server.allowHostBackend) return exposed;
  const what = exposed.map((e) => `profile "${e.profile}" runs on the host (backend local, no isolation) and token(s) ${e.tokenIds.join(', ')} may use it`);
  throw new ConfigError(`${what.join('; ')}: remote callers would run commands as berth's own user. ` +
    'Revoke those tokens (berth token revoke ID) and create ones without that profile, give the profile a container backend, ' +
    'or set server.allowHostBackend: true in the config to accept it');
}

/** The loud start-up line for each host profile the operator allowed remote callers to use. */
export function hostExposureWarnings(exposed: readonly HostExposure[]): string[] {
  return exposed.map((e) => `WARNING: profile "${e.profile}" runs commands on this host as berth's own user, without isolation, ` +
    `for remote callers holding token(s) ${e.tokenIds.join(', ')} (server.allowHostBackend: true)`);
}
