/**
 * Monotonic time in milliseconds, injected where a duration decides behaviour (cache TTLs,
 * leases) so that tests move time instead of sleeping past it. The shape is lru-cache's `perf`
 * option, so one clock drives our own code and the library's TTLs alike.
 */
export interface Clock {
  now(): number;
}

/** The process's monotonic clock. */
export const systemClock: Clock = performance;

/** A clock that moves only when told (tests). */
export class FakeClock implements Clock {
  constructor(private ms = 1_000) {}
  now(): number {
    return this.ms;
  }
  advance(ms: number): void {
    this.ms += ms;
  }
}
