/*
 * When and how soon berth asks the API server again (pure: the transport does the I/O).
 *
 * - 429 Too Many Requests is the API server's flow control (API Priority and Fairness) turning
 *   the request away before it ran: always safe to send again, after its `Retry-After`.
 * - 5xx, a timeout and a dropped connection may come after the server acted, so only requests
 *   that do the same thing twice are sent again: reads, watches and deletes, and creates whose
 *   caller treats AlreadyExists as its own earlier success (`idempotentCreate`).
 * - A connection refused or reset before any answer on a kept-alive socket that the server had
 *   already closed never reached it: safe for every request.
 * Delays grow exponentially with jitter, so many clients turned away at once do not return at
 * once; `Retry-After` is a floor, never shortened. Attempts are bounded.
 */

export interface RetryPolicy {
  /** Attempts in all (the first included) for an answer the server gave (429, 5xx). */
  maxAttempts: number;
  /** Attempts in all when no answer came (refused, reset, timed out): a down server fails fast. */
  maxAttemptsWithoutAnswer: number;
  /** The first backoff; each retry doubles it up to `maxDelayMs`. */
  baseDelayMs: number;
  maxDelayMs: number;
  /** A `Retry-After` longer than this is waited for this long only. */
  maxRetryAfterMs: number;
}

export const DEFAULT_RETRY_POLICY: Readonly<RetryPolicy> = Object.freeze({
  maxAttempts: 10,
  maxAttemptsWithoutAnswer: 3,
  baseDelayMs: 200,
  maxDelayMs: 8_000,
  maxRetryAfterMs: 30_000,
});

/** What came back from one attempt. */
export type AttemptOutcome =
  | { kind: 'answer'; status: number }
  /** No answer: `reached` false when the request provably never got to the server. */
  | { kind: 'no-answer'; reached: boolean };

/** Statuses that say "not now" rather than "no". */
const TRANSIENT = new Set([500, 502, 503, 504]);

/** Whether a request that ended so may be sent again (`attempt` counts from 1). */
export function shouldRetry(policy: RetryPolicy, method: string, idempotentCreate: boolean, outcome: AttemptOutcome, attempt: number): boolean {
  const repeatable = method === 'GET' || method === 'HEAD' || method === 'DELETE' || (method === 'POST' && idempotentCreate);
  if (outcome.kind === 'no-answer') return attempt < policy.maxAttemptsWithoutAnswer && (repeatable || !outcome.reached);
  if (attempt >= policy.maxAttempts) return false;
  if (outcome.status === 429) return true;
  return repeatable && TRANSIENT.has(outcome.status);
}

/** A `Retry-After` header in ms (delta seconds or an HTTP date), or undefined when absent or unreadable. */
export function retryAfterMs(header: string | undefined, now: number): number | undefined {
  if (header === undefined || header.trim() === '') return undefined;
  const trimmed = header.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/**
 * How long to wait before attempt `attempt + 1`: half the exponential backoff plus a random
 * half of it ("equal jitter"), or with `Retry-After` that wait (capped) plus a random share of
 * the backoff, so clients told the same `Retry-After` spread out. `random` is in [0, 1).
 */
export function retryDelayMs(policy: RetryPolicy, attempt: number, retryAfter: number | undefined, random: number): number {
  const backoff = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.max(0, attempt - 1));
  if (retryAfter !== undefined) return Math.min(retryAfter, policy.maxRetryAfterMs) + Math.floor(random * backoff);
  return Math.floor(backoff / 2 + random * (backoff / 2));
}
