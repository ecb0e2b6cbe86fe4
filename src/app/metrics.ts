import { performance } from 'node:perf_hooks';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { DEFAULTS } from '../config/index.js';
import { errnoName, kernelErrno, LatencyCounts } from '../core/index.js';
import type { BindingStats, OpMeter, RequestMeters } from '../fuse/index.js';
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

const LATENCY_BUCKETS = DEFAULTS.metricsLatencyBuckets;

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

const PROCESS_PREFIX = 'ledgerfs_process_';
/** prom-client's event-loop monitor samples this often: in practice never (see processMetrics) */
const EVENT_LOOP_MONITOR_NEVER_MS = 2 ** 31 - 1;

/**
 * Node's process metrics (prom-client's defaults: CPU, memory, handles, heap, GC), all read when
 * scraped, except the event-loop lag: prom-client samples it with monitorEventLoopDelay every
 * 10 ms, a timer that wakes the daemon 100 times a second whether or not anything happens (an
 * idle mount: 1,893 wake-ups in 20 s against 43 without --metrics). Its timer is set to never
 * fire and its seven histogram gauges are replaced by one lag measured at scrape time: how long
 * a callback queued now waits for the loop.
 */
function processMetrics(registry: Registry): void {
  collectDefaultMetrics({ register: registry, prefix: PROCESS_PREFIX, eventLoopMonitoringPrecision: EVENT_LOOP_MONITOR_NEVER_MS });
  const lagName = `${PROCESS_PREFIX}nodejs_eventloop_lag_seconds`;
  for (const m of registry.getMetricsAsArray()) {
    if (m.name.startsWith(`${PROCESS_PREFIX}nodejs_eventloop_lag`)) registry.removeSingleMetric(m.name);
  }
  new Gauge({
    name: lagName, help: 'how long a callback queued at scrape time waited for the event loop', registers: [registry],
    async collect() {
      const t0 = performance.now();
      await new Promise((resolve) => setImmediate(resolve));
      this.set((performance.now() - t0) / 1000);
    },
  });
}

/** One op's request counts, kept in plain numbers: the hot path touches nothing else. */
class OpStats extends LatencyCounts {
  ok = 0;
  /** errno number -> failures */
  readonly failed = new Map<number, number>();
  /** bytes read or written (read and write only) */
  bytes = 0;
  constructor(readonly op: string) {
    super(LATENCY_BUCKETS);
  }
}

interface MetricValue {
  value: number;
  labels: Record<string, string>;
  metricName?: string;
}

/** A metric whose samples are made at scrape time from counts kept elsewhere. */
function scrapedMetric(registry: Registry, name: string, help: string, type: 'counter' | 'histogram', values: () => MetricValue[]): void {
  const metric = {
    name, help, type, aggregator: 'sum',
    get: async () => ({ name, help, type, aggregator: 'sum', values: values() }),
    reset: () => undefined,
  };
  registry.registerMetric(metric as unknown as Parameters<Registry['registerMetric']>[0]);
}

/**
 * The daemon's Prometheus metrics (`ledgerfs mount --metrics`). A FUSE request that ends adds
 * to numbers of its op's OpStats, made once per op at mount: no labels are hashed and no
 * strings built per request (prom-client's own children hash their labels on every call).
 * The samples, and everything else, are made when scraped.
 */
export class DaemonMetrics implements RequestMeters {
  readonly registry = new Registry();
  private readonly ops: OpStats[] = [];
  private readonly denials: Counter<'rule' | 'root'>;

  constructor() {
    processMetrics(this.registry);
    const ops = this.ops;
    scrapedMetric(this.registry, 'ledgerfs_fuse_requests_total', 'FUSE requests answered, by op and errno (OK: success)', 'counter', () => {
      const out: MetricValue[] = [];
      for (const s of ops) {
        out.push({ value: s.ok, labels: { op: s.op, errno: 'OK' } });
        for (const [n, v] of s.failed) out.push({ value: v, labels: { op: s.op, errno: errnoName(n) } });
      }
      return out;
    });
    const latency = 'ledgerfs_fuse_request_duration_seconds';
    scrapedMetric(this.registry, latency, 'time from a FUSE request reaching the core to its answer, by op', 'histogram', () =>
      ops.flatMap((s) => histogramSamples(latency, { op: s.op }, s)));
    scrapedMetric(this.registry, 'ledgerfs_fuse_bytes_total', 'bytes programs read and wrote through the mount, by op (read, write)', 'counter', () =>
      ops.filter((s) => s.op === 'read' || s.op === 'write').map((s) => ({ value: s.bytes, labels: { op: s.op } })));
    this.denials = new Counter({ name: 'ledgerfs_policy_denials_total', help: 'changes the policy refused, by rule and root', labelNames: ['rule', 'root'], registers: [this.registry] });
  }

  now(): number {
    return performance.now();
  }

  forOp(op: string): OpMeter {
    const s = new OpStats(op);
    this.ops.push(s);
    const moves = op === 'read' || op === 'write';
    return {
      ok: (t0, result) => {
        s.ok++;
        if (moves && typeof result === 'number') s.bytes += result;
        s.observe((performance.now() - t0) / 1000);
      },
      failed: (t0, err) => {
        const n = -kernelErrno(err);
        s.failed.set(n, (s.failed.get(n) ?? 0) + 1);
        s.observe((performance.now() - t0) / 1000);
      },
    };
  }

  /**
   * The kernel session's own counts (native-ll), read at scrape time: requests, wake-ups of the
   * JS thread, and what the busy-poll caught (each catch is a wake-up saved).
   */
  attachMount(mount: { stats?(): BindingStats | undefined }): void {
    const stats = mount.stats?.bind(mount);
    if (!stats) return;
    const r = this.registry;
    const read = (pick: (b: BindingStats) => number) => (): Array<[Record<string, string>, number]> => {
      const b = stats();
      return b ? [[{}, pick(b)]] : [];
    };
    pulledCounter(r, 'ledgerfs_fuse_kernel_requests_total', 'requests the kernel sent, those answered without the core too (FORGET, security.capability; native-ll)', [], read((b) => b.requests));
    pulledCounter(r, 'ledgerfs_fuse_wakeups_total', 'times the daemon\'s JS thread was entered to serve FUSE requests (native-ll)', [], read((b) => b.wakeups));
    pulledCounter(r, 'ledgerfs_busy_poll_caught_requests_total', 'FUSE requests the busy-poll caught after an answer, each a wake-up saved (native-ll, --busy-poll)', [], read((b) => b.busyPollCaught));
    pulledCounter(r, 'ledgerfs_busy_poll_contended_total', 'busy-polls given up because another task held the CPU (native-ll)', [], read((b) => b.busyPollContended));
  }

  /** Read the layers at scrape time from now on. */
  attach(s: MetricSources): void {
    const r = this.registry;
    const policy = s.policy;
    if (policy) {
      const roots = policy.compiled.roots;
      const rootOf = (path: string) => {
        const loc = policy.compiled.locate(path);
        return loc?.kind === 'root' ? loc.path : '(none)';
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
      const fsync = 'ledgerfs_journal_fsync_duration_seconds';
      scrapedMetric(r, fsync, 'time each fsync of the journal took (group commit, and before a program\'s fsync is answered)', 'histogram', () => histogramSamples(fsync, {}, w.fsyncLatency));
    }
    const caches = s.store.caches;
    pulledCounter(r, 'ledgerfs_cache_hits_total', 'lookups a cache layer answered itself, by layer', ['layer'], () => caches.map((c) => [{ layer: c.layer }, c.hits()]));
    pulledCounter(r, 'ledgerfs_cache_misses_total', 'lookups a cache layer passed on, by layer', ['layer'], () => caches.map((c) => [{ layer: c.layer }, c.misses()]));
    pulledCounter(r, 'ledgerfs_backend_retries_total', 'backend requests retried after a transient failure (GCS)', [], () => [[{}, s.store.retries()]]);
    const traffic = s.store.traffic;
    if (traffic) {
      pulledCounter(r, 'ledgerfs_gcs_bytes_total', 'object bytes received from the bucket (in) and sent to it (out; each upload attempt)', ['direction'], () => {
        const t = traffic();
        return [[{ direction: 'in' }, t.bytesIn], [{ direction: 'out' }, t.bytesOut]];
      });
    }
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

/** A histogram's samples (buckets cumulative, +Inf, sum, count) from counts kept in plain numbers. */
function histogramSamples(name: string, labels: Record<string, string>, h: LatencyCounts): MetricValue[] {
  const out: MetricValue[] = [];
  let acc = 0;
  h.bounds.forEach((le, i) => {
    acc += h.buckets[i] as number;
    out.push({ metricName: `${name}_bucket`, labels: { le: String(le), ...labels }, value: acc });
  });
  out.push({ metricName: `${name}_bucket`, labels: { le: '+Inf', ...labels }, value: h.count });
  out.push({ metricName: `${name}_sum`, labels, value: h.sum });
  out.push({ metricName: `${name}_count`, labels, value: h.count });
  return out;
}
