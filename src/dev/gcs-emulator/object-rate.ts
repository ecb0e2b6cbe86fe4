import { EmulatorError } from './errors.js';

/**
 * GCS's per-object limits (cloud.google.com/storage/quotas): about one write per second to the
 * same object name, and one metadata update per second to the same object; beyond them it may
 * answer 429 `rateLimitExceeded`. How much of a burst it lets through is not documented, so
 * `burst` is the emulator's setting. Off unless asked for: tests of other things should not
 * wait on it, but a client whose request pattern writes one name several times in a row (an
 * empty create, then the bytes, then a chmod) can be seen paying for it on a real bucket.
 */
export interface ObjectRateLimit {
  /** sustained mutations per second per object name (GCS: 1) */
  perSecond: number;
  /** mutations allowed back to back before the rate applies */
  burst: number;
}

export type MutationKind = 'write' | 'metadata';

export class ObjectRateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(private readonly limit: ObjectRateLimit) {}

  /** Take one token for `kind` on bucket/name, or throw the 429 GCS answers. */
  take(bucket: string, name: string, kind: MutationKind, now = Date.now()): void {
    const key = `${kind}\0${bucket}\0${name}`;
    const b = this.buckets.get(key) ?? { tokens: this.limit.burst, at: now };
    b.tokens = Math.min(this.limit.burst, b.tokens + ((now - b.at) / 1000) * this.limit.perSecond);
    b.at = now;
    if (b.tokens < 1) {
      this.buckets.set(key, b);
      throw new EmulatorError(
        429,
        'rateLimitExceeded',
        `The object ${bucket}/${name} exceeded the rate limit for object mutation operations (create, update, and delete). Please reduce your request rate. See https://cloud.google.com/storage/docs/gcs429.`,
      );
    }
    b.tokens -= 1;
    this.buckets.set(key, b);
    // forget names that are back to a full burst (a bucket of many names stays small)
    if (this.buckets.size > 100_000) for (const [k, v] of this.buckets) if (v.tokens + ((now - v.at) / 1000) * this.limit.perSecond >= this.limit.burst) this.buckets.delete(k);
  }
}
