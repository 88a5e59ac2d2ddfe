/*
 * The API server's flow control as a client meets it (API Priority and Fairness): past its share,
 * a client's requests are turned away with 429 Too Many Requests and `Retry-After` before they
 * run. Here a token bucket per client (per credential): `burst` requests at once, refilled at
 * `requestsPerSecond`. Long-running requests other than watches (exec) are not counted, as APF
 * does not hold seats for them; a watch counts when it starts.
 */

export interface FlowControlOptions {
  requestsPerSecond: number;
  burst: number;
  /** The `Retry-After` a refusal carries. Default 1, as APF sends. */
  retryAfterSeconds?: number;
}

export class FlowControl {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(readonly opts: FlowControlOptions, private readonly now: () => number = Date.now) {}

  /** Takes one request's token from `client`'s bucket; false when it is empty. */
  admit(client: string): boolean {
    const t = this.now();
    const b = this.buckets.get(client) ?? { tokens: this.opts.burst, at: t };
    b.tokens = Math.min(this.opts.burst, b.tokens + ((t - b.at) / 1000) * this.opts.requestsPerSecond);
    b.at = t;
    this.buckets.set(client, b);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }
}
