/**
 * A latency histogram kept in plain numbers (count, sum, per-bucket counts): what a hot path
 * can afford to update, made into Prometheus samples only when scraped.
 */
export class LatencyCounts {
  count = 0;
  sum = 0;
  /** per bound (not cumulative), the last one past every bound */
  readonly buckets: Float64Array;

  constructor(readonly bounds: readonly number[]) {
    this.buckets = new Float64Array(bounds.length + 1);
  }

  observe(seconds: number): void {
    this.count++;
    this.sum += seconds;
    let i = 0;
    while (i < this.bounds.length && seconds > (this.bounds[i] as number)) i++;
    this.buckets[i] = (this.buckets[i] as number) + 1;
  }
}
