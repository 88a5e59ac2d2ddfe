import { TimeoutError } from '../errors.js';
import { ownerAlive } from './process-owner.js';
import type { ResolvedCall } from './resolve-call.js';
import type { SandboxRecord, StateStore } from './state-store.js';

/** How long a process waits for another one creating the same sandbox, and when its claim is stale. */
const CLAIM_WAIT_MS = 90_000;
const CLAIM_STALE_MS = 60_000;

/**
 * Get-or-create across processes: the record is the claim. The process that inserts it creates
 * the sandbox; another one waits until the claimant records its ref (or gave up, or crashed).
 * The intent is recorded before any container exists, so no orphan reaper mistakes it for one.
 * `processToken` names this process on the claims it makes.
 */
export async function claimOrAwait(
  store: StateStore, processToken: string, call: ResolvedCall, backend: string, known: SandboxRecord | undefined,
): Promise<{ record: SandboxRecord; mine: boolean }> {
  const deadline = Date.now() + CLAIM_WAIT_MS;
  let rec = known;
  for (;;) {
    const now = Date.now();
    if (rec === undefined) {
      const fresh: SandboxRecord = {
        digest: call.spec.digest, backend, tenant: call.scope.tenant, profile: call.spec.identity.profile ?? null,
        key: call.binding.sandboxKey, rule: call.spec.rule, ephemeral: call.spec.ephemeral, ref: '', name: call.spec.dirName,
        hostDir: null, mount: call.spec.mount, createdMs: now, lastUsedMs: now, claimOwner: processToken,
      };
      if (store.claimSandbox(fresh)) return { record: fresh, mine: true };
    } else if (rec.ref !== '') {
      return { record: rec, mine: false };
    } else if (claimAbandoned(rec, now) && store.takeOverClaim(rec.digest, rec.createdMs, now, processToken)) {
      return { record: { ...rec, createdMs: now, claimOwner: processToken }, mine: true };
    } else if (now > deadline) {
      throw new TimeoutError(`sandbox "${call.binding.sandboxKey}" is being created by another berth process and has no container after ${CLAIM_WAIT_MS / 1000} s; retry, or check that process`);
    } else {
      await new Promise((r) => setTimeout(r, 25));
    }
    rec = store.getSandbox(call.spec.digest);
  }
}

/**
 * A creation claim nobody will finish: its process is dead, or (a claim from before claims named
 * their process) it is older than CLAIM_STALE_MS.
 */
export function claimAbandoned(rec: SandboxRecord, nowMs: number): boolean {
  if (rec.claimOwner !== undefined && rec.claimOwner !== null) return !ownerAlive(rec.claimOwner);
  return nowMs - rec.createdMs > CLAIM_STALE_MS;
}
