import { parseArgs, type ParseArgsConfig } from 'node:util';
import { UsageError } from '../errors.js';
import type { CallScopeInput } from '../scope/call-scope.js';

type Options = NonNullable<ParseArgsConfig['options']>;

/** Scope flags, on every command that takes a scope (the CLI contract). */
export const SCOPE_OPTIONS = {
  tenant: { type: 'string' },
  profile: { type: 'string' },
  session: { type: 'string' },
  task: { type: 'string' },
  parent: { type: 'string' },
  user: { type: 'string' },
  workspace: { type: 'string' },
} as const satisfies Options;

export const COMMON_OPTIONS = {
  config: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies Options;

export interface Parsed<V> {
  values: V;
  positionals: string[];
  /** Words after `--` (undefined when there was no `--`). */
  rest: string[] | undefined;
}

/** Parses flags strictly; everything after the first `--` is returned untouched in `rest`. */
export function parseFlags<O extends Options>(command: string, argv: string[], options: O): Parsed<ReturnType<typeof parseArgs<{ options: O; allowPositionals: true; strict: true }>>['values']> {
  const dd = argv.indexOf('--');
  const head = dd === -1 ? argv : argv.slice(0, dd);
  const rest = dd === -1 ? undefined : argv.slice(dd + 1);
  try {
    const { values, positionals } = parseArgs({ args: head, options, allowPositionals: true, strict: true });
    return { values, positionals, rest };
  } catch (err) {
    const msg = err instanceof Error ? err.message.replace(/\. To specify a positional.*$/s, '') : String(err);
    throw new UsageError(`${msg} (see "berth ${command} --help")`);
  }
}

/** Builds the call scope from scope flags. The process cwd is a `process`-sourced workspace. */
export function scopeFromFlags(v: { tenant?: string; profile?: string; session?: string; task?: string; parent?: string; user?: string; workspace?: string }, env: NodeJS.ProcessEnv, cwd: string): CallScopeInput {
  if (v.parent !== undefined && v.task === undefined) {
    throw new UsageError('--parent registers a subagent and needs --task TASK too');
  }
  return {
    tenant: v.tenant,
    profile: v.profile,
    session: v.session,
    task: v.task,
    parentTask: v.parent,
    user: v.user,
    workspace: v.workspace !== undefined
      ? { path: v.workspace, source: 'session' }
      : { path: env['BERTH_CWD'] || cwd, source: 'process' },
  };
}

export const SCOPE_HELP = `scope flags:
  --tenant T          tenant namespace (default: local)
  --profile P         agent profile (default: default)
  --session S         conversation id
  --task T            task id
  --parent TASK       register --task as a subagent of TASK
  --user PLATFORM:ID  end user, e.g. telegram:123456789
  --workspace DIR     attach a host dir to the session (mounted at /workspace when workspace.mount is on)
  --config FILE       config file (default: ./berth.yaml, then $BERTH_HOME/config.yaml)`;
