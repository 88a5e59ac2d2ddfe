import type { SandboxSpec } from '../backends/backend.js';
import type { BackendTraits } from '../config/backend-traits.js';
import { resolveStartCwd } from '../policy/cwd.js';
import type { CallScope } from '../scope/call-scope.js';
import { shellIdentity } from '../scope/naming.js';
import type { ProfileSettings } from '../setup/berth-config.js';
import type { ScopeRecords } from './state/scope-records.js';

/** The records a start cwd is read from: each shell identity's cwd, and each subagent task's parent. */
export type CwdLookup = Pick<ScopeRecords, 'getCwd' | 'aliasParent'>;

/** What of a call its start cwd depends on (a resolved call has it all). */
export interface StartCwdCall {
  scope: CallScope;
  settings: Pick<ProfileSettings, 'backend'>;
  traits: Pick<BackendTraits, 'mountsHostDirs'>;
  spec: Pick<SandboxSpec, 'mount'>;
  shell: { digest: string };
  isSubagent: boolean;
  defaultCwd: string;
}

/**
 * Where a new shell for this call starts: the shell identity's recorded cwd (a subagent without
 * one inherits its parent's), mapped or discarded for containers, else the sandbox default.
 */
export function startCwd(scopes: CwdLookup, call: StartCwdCall): string {
  return recordedStartCwd(scopes, call) ?? call.defaultCwd;
}

/**
 * The recorded start cwd alone, undefined where no record applies. A new shell is given only this:
 * without it, the cwd its identity's saved shell state holds comes before the sandbox default (a
 * session closed by a berth that stopped leaves no record, but its persistent sandbox keeps that
 * state, variables and cwd alike).
 */
export function recordedStartCwd(scopes: CwdLookup, call: StartCwdCall): string | undefined {
  const record = scopes.getCwd(call.shell.digest) ?? inheritedCwd(scopes, call.scope, call.isSubagent);
  const recorded = record === undefined ? undefined : { path: record.cwd, backend: record.backend };
  return resolveStartCwd({
    recorded, backendName: call.settings.backend, containerBackend: call.traits.mountsHostDirs,
    mount: call.spec.mount, defaultCwd: undefined,
  });
}

/** A subagent's shell starts in its parent's recorded cwd (the parent task's, else the session's). */
function inheritedCwd(scopes: CwdLookup, scope: CallScope, isSubagent: boolean): { cwd: string; backend: string } | undefined {
  if (!isSubagent || scope.task === undefined) return undefined;
  const parent = scopes.aliasParent(scope.tenant, scope.profile, scope.task);
  if (parent === undefined || parent === '') return undefined;
  const parentIsSubagent = scopes.aliasParent(scope.tenant, scope.profile, parent) !== undefined;
  const parentShell = shellIdentity({ ...scope, task: parent, parentTask: undefined }, parentIsSubagent);
  const own = scopes.getCwd(parentShell.digest);
  if (own !== undefined) return own;
  if (scope.session === undefined) return undefined;
  return scopes.getCwd(shellIdentity({ ...scope, task: undefined, parentTask: undefined }, false).digest);
}
