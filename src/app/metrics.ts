import { performance } from 'node:perf_hooks';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { errnoName, kernelErrno } from '../core/index.js';
import type { OpMeter, RequestMeters } from '../fuse/index.js';
import type { MountJournal } from '../journal/index.js';
import type { Denial } from '../policy/index.js';
import type { Vfs } from '../vfs/index.js';
import type { PolicyRuntime, StoreStats } from './workspace.js';

/** What the daemon's metrics read at scrape time (nothing of this is counted per request). */
export interface MetricSources {
  vfs: Vfs;
  store: StoreStats;
  policy?: PolicyRuntime | undefined;
  journal?: MountJournal | null | undefined;
}

/** request latency buckets, seconds: from a cached getattr (tens of µs) to a slow upload */
const LATENCY_BUCKETS = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * A counter whose value lives elsewhere (a layer's own hit count, the journal writer's bytes):
 * read at scrape time and added as the difference since the last scrape, so it stays a counter.
 */
function pulledCounter(registry: Registry, name: string, help: string, labelNames: string[], read: () => Array<[Record<string, string>, number]>): void {
  const last = new Map<string, number>();
  new Counter({
    name, help, labelNames, registers: [registry],
    collect() {
      for (const [labels, value] of read()) {
        const key = JSON.stringify(labels);
        const delta = value - (last.get(key) ?? 0);
        if (delta > 0) this.inc(labels, delta);
        last.set(key, value);
      }
    },
  });
}

/**
 * The daemon's Prometheus metrics (`ledgerfs mount --metrics`). FUSE requests are counted as they
 * end, through children made once per op (and once per op and errno, at the first such failure):
 * no label strings are built per request. Everything else is read from the layers when scraped.
 */
export class DaemonMetrics implements RequestMeters {
  readonly registry = new Registry();
  private readonly requests: Counter<'op' | 'errno'>;
  private readonly duration: Histogram<'op'>;
  private readonly denials: Counter<'rule' | 'root'>;

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'ledgerfs_process_' });
    this.requests = new Counter({ name: 'ledgerfs_fuse_requests_total', help: 'FUSE requests answered, by op and errno (OK: success)', labelNames: ['op', 'errno'], registers: [this.registry] });
    this.duration = new Histogram({ name: 'ledgerfs_fuse_request_duration_seconds', help: 'time from a FUSE request reaching the core to its answer, by op', labelNames: ['op'], buckets: LATENCY_BUCKETS, registers: [this.registry] });
    this.denials = new Counter({ name: 'ledgerfs_policy_denials_total', help: 'changes the policy refused, by rule and root', labelNames: ['rule', 'root'], registers: [this.registry] });
  }

  now(): number {
    return performance.now();
  }

  forOp(op: string): OpMeter {
    const ok = this.requests.labels(op, 'OK');
    const hist = this.duration.labels(op);
    const byErrno = new Map<number, { inc(): void }>();
    const requests = this.requests;
    return {
      ok: (t0) => {
        ok.inc();
        hist.observe((performance.now() - t0) / 1000);
      },
      failed: (t0, err) => {
        const n = -kernelErrno(err);
        let c = byErrno.get(n);
        if (c === undefined) byErrno.set(n, (c = requests.labels(op, errnoName(n))));
        c.inc();
        hist.observe((performance.now() - t0) / 1000);
      },
    };
  }

  /** Read the layers at scrape time from now on. */
  attach(s: MetricSources): void {
    const r = this.registry;
    const policy = s.policy;
    if (policy) {
      const roots = policy.compiled.roots;
      const rootOf = (path: string) => {
        let best = '';
        for (const root of roots) if ((path === root.path || path.startsWith(root.path === '/' ? '/' : root.path + '/')) && root.path.length > best.length) best = root.path;
        return best || '(none)';
      };
      policy.denials.onRecord = (d: Denial) => this.denials.inc({ rule: d.rule, root: rootOf(d.path) });
      const quota = (name: string, help: string, read: (rootIndex: number) => number | undefined) =>
        new Gauge({
          name, help, labelNames: ['root'], registers: [r],
          collect() {
            for (const root of roots) {
              const v = read(root.index);
              if (v !== undefined) this.set({ root: root.path }, v);
            }
          },
        });
      const usage = (i: number) => policy.usage.byRoot[i] ?? undefined;
      quota('ledgerfs_quota_used_bytes', 'bytes a root holds as its quota counts them (counted roots only)', (i) => usage(i)?.bytes);
      quota('ledgerfs_quota_used_files', 'files and directories a root holds (counted roots only)', (i) => usage(i)?.files);
      quota('ledgerfs_quota_limit_bytes', 'a root\'s byte quota (roots with one only)', (i) => roots[i]?.quota.bytes);
      quota('ledgerfs_quota_limit_files', 'a root\'s file quota (roots with one only)', (i) => roots[i]?.quota.files);
    }
    const journal = s.journal;
    if (journal) {
      const w = journal.service.writer;
      pulledCounter(r, 'ledgerfs_journal_records_total', 'records written to the journal by this mount', [], () => [[{}, w.recordsWritten]]);
      pulledCounter(r, 'ledgerfs_journal_bytes_total', 'bytes written to the journal by this mount', [], () => [[{}, w.bytesWritten]]);
      pulledCounter(r, 'ledgerfs_journal_before_image_bytes_total', 'bytes of before-images kept by this mount (for rollback)', [], () => [[{}, journal.service.blobs.capturedBytes]]);
    }
    const caches = s.store.caches;
    pulledCounter(r, 'ledgerfs_cache_hits_total', 'lookups a cache layer answered itself, by layer', ['layer'], () => caches.map((c) => [{ layer: c.layer }, c.hits()]));
    pulledCounter(r, 'ledgerfs_cache_misses_total', 'lookups a cache layer passed on, by layer', ['layer'], () => caches.map((c) => [{ layer: c.layer }, c.misses()]));
    pulledCounter(r, 'ledgerfs_backend_retries_total', 'backend requests retried after a transient failure (GCS)', [], () => [[{}, s.store.retries()]]);
    pulledCounter(r, 'ledgerfs_gcs_requests_total', 'requests to the bucket (each attempt), by HTTP method and status (ok, the HTTP code, or network)', ['method', 'status'], () =>
      s.store.requests().map((q) => [{ method: q.method, status: q.status }, q.count]));
    const vfs = s.vfs;
    new Gauge({
      name: 'ledgerfs_open_files', help: 'file handles programs hold open on the mount', registers: [r],
      collect() {
        this.set(vfs.openHandles);
      },
    });
  }
}
