import { setTimeout as sleep } from 'node:timers/promises';
import { httpStatus, isTransient } from './errors.js';

/*
 * The one retry policy for GCS requests. The client's own retries are switched off (see
 * client.ts for why): here every request is retried the same way, with exponential backoff and
 * jitter, on 408/429/5xx and connection failures. Requests that change state carry generation
 * preconditions, which is what makes retrying them safe; a retry that finds its own earlier
 * attempt already applied (412 / 404 after a lost response) is recognized by the caller.
 */

export interface RetryPolicy {
  /** attempts including the first */
  attempts: number;
  initialDelayMs: number;
  maxDelayMs: number;
  totalTimeoutMs: number;
  /** the least wait before retrying a 429 (DEFAULTS.gcs.rateLimitRetryDelayMs unless set) */
  rateLimitDelayMs: number;
}

export interface RetryCounters {
  retries: number;
  /** every attempt, by "METHOD STATUS" (status: the HTTP code, `ok`, or `network`), for metrics */
  attempts?: Map<string, number>;
}

function countAttempt(counters: RetryCounters, method: string, status: string): void {
  const m = counters.attempts;
  if (m === undefined) return;
  const key = `${method} ${status}`;
  m.set(key, (m.get(key) ?? 0) + 1);
}

export interface Attempt {
  /** 1 for the first try */
  number: number;
}

/** `method`: the HTTP method the request uses, for the counts in `counters.attempts` */
export async function withRetries<T>(policy: RetryPolicy, counters: RetryCounters, fn: (a: Attempt) => Promise<T>, method = 'GET'): Promise<T> {
  const start = Date.now();
  for (let n = 1; ; n++) {
    try {
      const v = await fn({ number: n });
      countAttempt(counters, method, 'ok');
      return v;
    } catch (err) {
      countAttempt(counters, method, String(httpStatus(err) ?? 'network'));
      if (n >= policy.attempts || !isTransient(err)) throw err;
      const ceiling = Math.min(policy.maxDelayMs, policy.initialDelayMs * 2 ** (n - 1));
      let delay = ceiling / 2 + Math.random() * (ceiling / 2);
      if (httpStatus(err) === 429) {
        // a rate limit (GCS: per object name, per second) is not over sooner than it refills
        const floor = policy.rateLimitDelayMs;
        delay = Math.max(delay, floor + Math.random() * (floor / 4));
      }
      if (Date.now() - start + delay > policy.totalTimeoutMs) throw err;
      counters.retries++;
      await sleep(delay);
    }
  }
}
