import type { TenantLimits } from '../config/types.js';
import { HttpError } from './http-error.js';

/**
 * Per-tenant bounds of one `berth serve`: calls running at once (`limits.concurrentCalls`) and
 * upload bytes being received at once (`limits.uploadBytesInFlight`). A tenant past either gets
 * 429 and nothing of its call runs; other tenants are not affected, whatever one tenant sends.
 */
export class TenantLimiter {
  private readonly calls = new Map<string, number>();
  private readonly bytes = new Map<string, number>();

  /** `limitsOf` gives the config's `limits` section, read when a call comes. */
  constructor(private readonly limitsOf: () => TenantLimits) {}

  private get limits(): TenantLimits {
    return this.limitsOf();
  }

  /** Takes one of the tenant's call slots; the returned release gives it back (once). */
  enterCall(tenant: string): () => void {
    const running = this.calls.get(tenant) ?? 0;
    const limit = this.limits.concurrentCalls;
    if (running >= limit) {
      throw new HttpError('too_many_calls',
        `this tenant already has ${running} calls running, its limit (limits.concurrentCalls = ${limit}); retry when one has finished, or raise limits.concurrentCalls in the config`,
        { 'retry-after': '1' });
    }
    this.calls.set(tenant, running + 1);
    return once(() => release(this.calls, tenant, 1));
  }

  /** Reserves `size` upload bytes of the tenant's allowance until the returned release (once). */
  reserveBytes(tenant: string, size: number): () => void {
    const inFlight = this.bytes.get(tenant) ?? 0;
    const limit = this.limits.uploadBytesInFlight;
    if (inFlight + size > limit) {
      throw new HttpError('too_many_bytes', size > limit
        ? `an upload of ${size} bytes is more than this tenant may have in flight (limits.uploadBytesInFlight = ${limit}); send less, or raise limits.uploadBytesInFlight in the config`
        : `this tenant has ${inFlight} upload bytes in flight and ${size} more would pass its limit (limits.uploadBytesInFlight = ${limit}); retry when an upload has finished, or raise limits.uploadBytesInFlight in the config`,
      { 'retry-after': '1' });
    }
    this.bytes.set(tenant, inFlight + size);
    return once(() => release(this.bytes, tenant, size));
  }
}

function release(counts: Map<string, number>, tenant: string, n: number): void {
  const left = (counts.get(tenant) ?? 0) - n;
  if (left > 0) counts.set(tenant, left);
  else counts.delete(tenant);
}

function once(fn: () => void): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    fn();
  };
}
