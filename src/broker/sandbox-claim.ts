import type { SandboxReservation } from '../backends/module.js';
import { BerthError, TimeoutError } from '../errors.js';
import { ownerAlive } from '../kit/process-owner.js';
import type { ResolvedCall } from './resolve-call.js';
import type { SandboxRecord, SandboxTable, TenantQuota, TenantUsage } from './state/sandbox-table.js';

/** How long a process waits for another one creating the same sandbox, and when its claim is stale. */
const CLAIM_WAIT_MS = 90_000;
const CLAIM_STALE_MS = 60_000;

/**
 * Get-or-create across processes: the record is the claim. The process that inserts it creates
 * the sandbox; another one waits until the claimant records its ref (or gave up, or crashed).
 * The intent is recorded before any container exists, so no orphan reaper mistakes it for one.
 * `processToken` names this process on the claims it makes. A new sandbox counts against its
 * tenant's `quota` with what it `reserves`; past the quota nothing is created (`tenant_limit`).
 */
export async function claimOrAwait(
  sandboxes: Pick<SandboxTable, 'claim' | 'tenantUsage' | 'takeOverClaim' | 'get'>, processToken: string, call: ResolvedCall, backend: string, known: SandboxRecord | undefined,
  limits?: { quota: TenantQuota; reserves: SandboxReservation },
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
        memoryMb: limits?.reserves.memoryMb ?? null, diskMb: limits?.reserves.diskMb ?? null,
      };
      const claimed = sandboxes.claim(fresh, limits?.quota);
      if (claimed === 'claimed') return { record: fresh, mine: true };
      if (claimed === 'over' && limits !== undefined) {
        throw overQuota(call, limits.quota, limits.reserves, sandboxes.tenantUsage(call.scope.tenant).get(call.scope.tenant));
      }
    } else if (rec.ref !== '') {
      return { record: rec, mine: false };
    } else if (claimAbandoned(rec, now) && sandboxes.takeOverClaim(rec.digest, rec.createdMs, now, processToken)) {
      return { record: { ...rec, createdMs: now, claimOwner: processToken }, mine: true };
    } else if (now > deadline) {
      throw new TimeoutError(`sandbox "${call.binding.sandboxKey}" is being created by another berth process and has no container after ${CLAIM_WAIT_MS / 1000} s; retry, or check that process`);
    } else {
      await new Promise((r) => setTimeout(r, 25));
    }
    rec = sandboxes.get(call.spec.digest);
  }
}

/** The refusal of a sandbox past its tenant's quota: which limit, where the tenant stands, and the fixes. */
function overQuota(call: ResolvedCall, quota: TenantQuota, reserves: SandboxReservation, used: TenantUsage = { sandboxes: 0, memoryMb: 0, diskMb: 0 }): BerthError {
  const tenant = call.scope.tenant;
  const free = 'close a session (its ephemeral sandbox goes) or remove a sandbox (berth rm)';
  let what: string;
  if (used.sandboxes >= quota.sandboxes) {
    what = `tenant "${tenant}" holds ${used.sandboxes} sandboxes, its limit (limits.sandboxes = ${quota.sandboxes}); ${free}, or raise limits.sandboxes`;
  } else if (used.memoryMb + (reserves.memoryMb ?? 0) > quota.memoryMb) {
    what = `tenant "${tenant}" has sandboxes with ${used.memoryMb} MiB of memory limits and this one would add ${reserves.memoryMb ?? 0} MiB, ` +
      `past its limit (limits.memoryMb = ${quota.memoryMb}); ${free}, lower the sandboxes' memoryMb, or raise limits.memoryMb`;
  } else {
    what = `tenant "${tenant}" has sandboxes with ${used.diskMb} MiB of disk bounds and this one would add ${reserves.diskMb ?? 0} MiB, ` +
      `past its limit (limits.diskMb = ${quota.diskMb}); ${free}, lower the sandboxes' diskMb, or raise limits.diskMb`;
  }
  return new BerthError('tenant_limit', `sandbox "${call.binding.sandboxKey}" was not created: ${what}`);
}

/**
 * A creation claim nobody will finish: its process is dead, or (a claim from before claims named
 * their process) it is older than CLAIM_STALE_MS.
 */
export function claimAbandoned(rec: SandboxRecord, nowMs: number): boolean {
  if (rec.claimOwner !== undefined && rec.claimOwner !== null) return !ownerAlive(rec.claimOwner);
  return nowMs - rec.createdMs > CLAIM_STALE_MS;
}
