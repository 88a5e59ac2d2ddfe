/** Where a workspace path came from: attached by the caller, or inherited from the process. */
export type CwdSource = 'session' | 'process';

export interface AttachedWorkspace {
  /** Host path as given (resolved to its real path by the mount policy). */
  path: string;
  source: CwdSource;
}

/**
 * Who is calling. Every call carries one explicitly (docs/design.md §2).
 * `tenant` and `profile` always have values after normalisation.
 */
export interface CallScope {
  tenant: string;
  profile: string;
  session?: string | undefined;
  task?: string | undefined;
  /** Registers `task` as a subagent of `parentTask` (alias child -> parent). */
  parentTask?: string | undefined;
  /** End user of a messaging platform, `platform:id`. */
  user?: string | undefined;
  workspace?: AttachedWorkspace | undefined;
  /** The bearer token a remote call came with: recorded in the audit, never a choice of sandbox. */
  token?: CallToken | undefined;
}

/** A token as the audit names it: its id (`tok_...`) and its name when it has one (`berth token create --name`). */
export interface CallToken {
  id: string;
  name?: string | undefined;
}

export const DEFAULT_TENANT = 'local';
export const DEFAULT_PROFILE = 'default';

/** Partial scope as callers give it; `normalizeScope` fills defaults and drops empty strings. */
export type CallScopeInput = Partial<CallScope>;
