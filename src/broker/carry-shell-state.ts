import type { Sandbox } from '../backends/backend.js';
import { BerthError } from '../errors.js';
import { snapshotPathOf } from '../shell/persistent-shell.js';
import type { ResolvedCall } from './resolve-call.js';
import type { ScopeRecords } from './state/scope-records.js';
import type { SnapshotRecord } from './state/snapshot-table.js';

/**
 * The shell of `call` starts where the snapshot's shell left off: its cwd record is the
 * snapshot's, and its saved state (exported variables, functions, aliases) is the snapshot
 * shell's, copied inside the new sandbox when the shell identity differs (a fork's new session).
 */
export async function carryShellState(
  scopes: Pick<ScopeRecords, 'putCwd'>, call: ResolvedCall, sandbox: Sandbox, snap: SnapshotRecord, sourceCwd: string,
): Promise<string | null> {
  const cwd = snap.cwd === null ? null : rebased(snap.cwd, sourceCwd, call.defaultCwd);
  if (cwd !== null) {
    scopes.putCwd(call.shell.digest, {
      tenant: call.scope.tenant, profile: call.scope.profile, session: call.scope.session ?? null, cwd, backend: call.settings.backend,
    }, Date.now());
  }
  if (snap.shellStem === null || snap.shellStem === call.shell.fileStem) return cwd;
  const from = snapshotPathOf(sandbox.stateDir, snap.shellStem);
  const to = snapshotPathOf(sandbox.stateDir, call.shell.fileStem);
  // Run in the sandbox as its user; `mv` replaces a link planted at the target instead of writing through it.
  const r = await sandbox.execOnce(['sh', '-c', '[ -f "$1" ] || exit 0; umask 077; cat -- "$1" > "$2.fork" && mv -f -- "$2.fork" "$2"', 'sh', from, to], { timeoutMs: 10_000 });
  if (r.exitCode !== 0) throw new BerthError('transfer_failed', `the shell state could not be copied in the new sandbox (exit ${r.exitCode}): ${r.stderr.toString('utf8').slice(0, 200)}`);
  return cwd;
}

/**
 * A cwd under the source sandbox's default dir, moved under the new sandbox's: the same path where
 * sandboxes share their layout (a container's /workspace), the new dir where a sandbox's paths
 * are its own host dir.
 */
function rebased(cwd: string, from: string, to: string): string {
  if (from === to) return cwd;
  if (cwd === from) return to;
  return cwd.startsWith(`${from}/`) ? to + cwd.slice(from.length) : cwd;
}
