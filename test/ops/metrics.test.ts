import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RUNNING_BINDING, run, startMount, startTestEmulator, type TestEmulator, type TestMount } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { listSegments } from '../../src/journal/layout.js';

/** `ledgerfs mount --metrics`: counters after a known workload, and /healthz following the backend. */

function metricsUrl(m: TestMount): string {
  const line = m.logs().split('\n').find((l) => l.includes('"metrics served"'));
  if (!line) throw new Error(`no "metrics served" line in the log:\n${m.logs()}`);
  return (JSON.parse(line) as { metrics: string }).metrics.replace(/\/metrics$/, '');
}

/** The value of one sample, e.g. sample(text, 'ledgerfs_fuse_requests_total', {op: 'create', errno: 'OK'}); 0 if absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v) && Object.keys(got).length === Object.keys(labels).length) return Number(m[3]);
  }
  return 0;
}

async function get(url: string): Promise<{ status: number; text: string }> {
  const r = await fetch(url);
  return { status: r.status, text: await r.text() };
}

describe('metrics and health', () => {
  let m: TestMount | undefined;
  let emulator: TestEmulator | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await m?.stop();
    await emulator?.stop();
    if (dir) rmTemp(dir);
    m = emulator = dir = undefined;
  });

  it('counts creates, denials by rule and root, and journal records exactly', async () => {
    dir = makeTemp('metrics');
    const ws = path.join(dir, 'ws');
    const state = path.join(dir, 'state');
    fs.mkdirSync(path.join(ws, 'docs'), { recursive: true });
    fs.mkdirSync(path.join(ws, 'w'));
    fs.writeFileSync(path.join(ws, 'docs/readme.txt'), 'read me\n');
    fs.writeFileSync(path.join(dir, 'p.yaml'), 'backend: {type: local, path: ./ws}\nroots:\n  - {path: /docs, mode: ro}\n  - {path: /w, mode: rw, quota: {bytes: 1MiB, files: 50}, suffixes: [.txt]}\n');
    m = await startMount({ src: ws, omitSource: true, args: ['--policy', path.join(dir, 'p.yaml'), '--state', state, '--metrics', '127.0.0.1:0'] });
    const url = metricsUrl(m);
    expect((await get(`${url}/healthz`)).status).toBe(200);

    const r = run('echo a > w/a.txt; echo bb > w/b.txt; : > w/c.txt; echo x > docs/new.txt; echo x > docs/new2.txt; echo x > w/bad.bin; true', m.mnt);
    expect(r.stderr.match(/Read-only file system/g)).toHaveLength(2);
    expect(r.stderr.match(/Permission denied/g)).toHaveLength(1);
    // the journal's outcomes are written within a moment (group commit)
    await new Promise((res) => setTimeout(res, 1500));
    const text = (await get(`${url}/metrics`)).text;

    expect(sample(text, 'ledgerfs_fuse_requests_total', { op: 'create', errno: 'OK' })).toBe(3);
    expect(sample(text, 'ledgerfs_fuse_requests_total', { op: 'create', errno: 'EROFS' })).toBe(2);
    expect(sample(text, 'ledgerfs_fuse_requests_total', { op: 'create', errno: 'EACCES' })).toBe(1);
    expect(sample(text, 'ledgerfs_policy_denials_total', { rule: 'read-only-root', root: '/docs' })).toBe(2);
    expect(sample(text, 'ledgerfs_policy_denials_total', { rule: 'suffix', root: '/w' })).toBe(1);
    expect(sample(text, 'ledgerfs_fuse_request_duration_seconds_count', { op: 'create' })).toBe(6);
    // quota: three files of 2 + 3 + 0 bytes in /w
    expect(sample(text, 'ledgerfs_quota_used_files', { root: '/w' })).toBe(3);
    expect(sample(text, 'ledgerfs_quota_used_bytes', { root: '/w' })).toBe(5);
    expect(sample(text, 'ledgerfs_quota_limit_bytes', { root: '/w' })).toBe(1024 * 1024);
    expect(sample(text, 'ledgerfs_quota_limit_files', { root: '/w' })).toBe(50);
    // journal records: every line in this (fresh) state directory's segments, counted independently
    const journalFiles = listSegments(path.join(state, 'journal')).map((seg) => seg.path);
    expect(journalFiles.length).toBeGreaterThan(0);
    const records = journalFiles.reduce((n, f) => n + fs.readFileSync(f, 'utf8').split('\n').filter((l) => l.length > 0).length, 0);
    const bytes = journalFiles.reduce((n, f) => n + fs.statSync(f).size, 0);
    expect(records).toBeGreaterThanOrEqual(6); // three creates and three writes at least
    expect(sample(text, 'ledgerfs_journal_records_total')).toBe(records);
    expect(sample(text, 'ledgerfs_journal_bytes_total')).toBe(bytes);
    expect(sample(text, 'ledgerfs_open_files')).toBe(0);
    expect(text).toMatch(/^ledgerfs_fuse_request_duration_seconds_bucket\{le="0.001",op="create"\} \d+$/m);
  });

  it('serves the process metrics, the event-loop lag measured at scrape time, without waking an idle daemon', async () => {
    m = await startMount({ args: ['--no-journal', '--metrics', '127.0.0.1:0'] });
    const url = metricsUrl(m);
    const pid = m.daemon.pid as number;
    // wake-ups of the daemon's JS thread: each time it slept and was woken
    const wakeups = () => Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(fs.readFileSync(`/proc/${pid}/task/${pid}/status`, 'utf8'))?.[1]);
    await new Promise((res) => setTimeout(res, 1000));
    const before = wakeups();
    await new Promise((res) => setTimeout(res, 3000));
    const woken = wakeups() - before;
    // prom-client's default event-loop monitor woke it every 10 ms (about 300 times here);
    // without it an idle mount wakes a few times a second at most
    expect(woken).toBeLessThan(90);

    run('echo hi > a.txt && cat a.txt', m.mnt);
    const text = (await get(`${url}/metrics`)).text;
    const lag = sample(text, 'ledgerfs_process_nodejs_eventloop_lag_seconds');
    expect(text).toMatch(/^ledgerfs_process_nodejs_eventloop_lag_seconds \d/m);
    expect(lag).toBeGreaterThan(0);
    expect(lag).toBeLessThan(5);
    // the monitor's histogram gauges are gone, not left at zero
    expect(text).not.toMatch(/nodejs_eventloop_lag_(min|max|mean|stddev|p50|p90|p99)_seconds/);
    // CPU and memory: read when scraped
    expect(sample(text, 'ledgerfs_process_process_cpu_seconds_total')).toBeGreaterThan(0);
    expect(sample(text, 'ledgerfs_process_process_resident_memory_bytes')).toBeGreaterThan(1024 * 1024);
    expect(sample(text, 'ledgerfs_process_nodejs_heap_size_used_bytes')).toBeGreaterThan(0);
    expect(sample(text, 'ledgerfs_fuse_requests_total', { op: 'create', errno: 'OK' })).toBe(1);
    // a second scrape measures again (not a value left from the first)
    expect((await get(`${url}/metrics`)).text).toMatch(/^ledgerfs_process_nodejs_eventloop_lag_seconds \d/m);
  });

  it('counts the bytes programs read and write, the journal\'s fsyncs, and (native-ll) wake-ups and busy-poll catches', async () => {
    dir = makeTemp('metrics-bytes');
    const ws = path.join(dir, 'ws');
    fs.mkdirSync(ws);
    // a file the kernel has not cached: its read reaches the daemon whole
    fs.writeFileSync(path.join(ws, 'old.bin'), Buffer.alloc(10_000, 7));
    m = await startMount({ src: ws, args: ['--state', path.join(dir, 'state'), '--metrics', '127.0.0.1:0'] });
    const url = metricsUrl(m);
    // 3 x 4,096 + 100 bytes written, fsynced (a program's fsync waits for the journal's), 10,000 read
    run(`python3 -c "
import os
fd = os.open('new.bin', os.O_WRONLY | os.O_CREAT, 0o644)
for n in (4096, 4096, 4096, 100): os.write(fd, b'x' * n)
os.fsync(fd); os.close(fd)
assert len(open('old.bin', 'rb').read()) == 10000
"`, m.mnt);
    const text = (await get(`${url}/metrics`)).text;
    expect(sample(text, 'ledgerfs_fuse_bytes_total', { op: 'write' })).toBe(3 * 4096 + 100);
    expect(sample(text, 'ledgerfs_fuse_bytes_total', { op: 'read' })).toBe(10_000);
    expect(sample(text, 'ledgerfs_journal_fsync_duration_seconds_count')).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'ledgerfs_journal_fsync_duration_seconds_bucket', { le: '+Inf' })).toBe(sample(text, 'ledgerfs_journal_fsync_duration_seconds_count'));
    expect(sample(text, 'ledgerfs_journal_fsync_duration_seconds_sum')).toBeGreaterThan(0);
    if (RUNNING_BINDING === 'native-ll') {
      const answered = [...text.matchAll(/^ledgerfs_fuse_requests_total\{[^}]*\} (\d+)$/gm)].reduce((n, x) => n + Number(x[1]), 0);
      const kernel = sample(text, 'ledgerfs_fuse_kernel_requests_total');
      const wakeups = sample(text, 'ledgerfs_fuse_wakeups_total');
      const caught = sample(text, 'ledgerfs_busy_poll_caught_requests_total');
      expect(answered).toBeGreaterThan(5);
      // the kernel's requests include those answered without the core (FORGET, security.capability)
      expect(kernel).toBeGreaterThanOrEqual(answered);
      expect(wakeups).toBeGreaterThan(0);
      expect(wakeups).toBeLessThanOrEqual(kernel);
      expect(caught).toBeLessThanOrEqual(kernel);
      expect(text).toMatch(/^ledgerfs_busy_poll_caught_requests_total \d+$/m);
      expect(text).toMatch(/^ledgerfs_busy_poll_contended_total \d+$/m);
    } else {
      expect(text).not.toMatch(/ledgerfs_fuse_wakeups_total/);
    }
  });

  it('/healthz answers 503 with the reason while the GCS backend fails, 200 again after', async () => {
    emulator = await startTestEmulator(['ledgerfs-health']);
    m = await startMount({ gcs: { emulator, bucket: 'ledgerfs-health' }, args: ['--no-journal', '--metrics', ':0'] });
    const url = metricsUrl(m);
    expect(await get(`${url}/healthz`)).toEqual({ status: 200, text: 'ok\n' });
    // a small workload: the bucket's requests are counted by method and status
    run('echo hi > a.txt && cat a.txt && ls', m.mnt);
    const text = (await get(`${url}/metrics`)).text;
    expect(sample(text, 'ledgerfs_gcs_requests_total', { method: 'POST', status: 'ok' })).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'ledgerfs_gcs_requests_total', { method: 'GET', status: 'ok' })).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'ledgerfs_fuse_requests_total', { op: 'create', errno: 'OK' })).toBe(1);
    // "hi\n" went up in the create's upload or the close's (at least once), and came back for cat
    // unless a cache kept it
    expect(sample(text, 'ledgerfs_gcs_bytes_total', { direction: 'out' })).toBeGreaterThanOrEqual(3);
    expect(text).toMatch(/^ledgerfs_gcs_bytes_total\{direction="in"\} \d+$/m);
    const r = await fetch(`${emulator.url}/_emulator/faults`, { method: 'POST', body: JSON.stringify({ status: 503, count: -1 }) });
    expect(r.ok).toBe(true);
    const down = await get(`${url}/healthz`);
    expect(down.status).toBe(503);
    expect(down.text).toMatch(/backend gs:\/\/ledgerfs-health\/ unreachable: .*503/);
    await fetch(`${emulator.url}/_emulator/faults`, { method: 'DELETE' });
    expect((await get(`${url}/healthz`)).status).toBe(200);
    // the emulator gone altogether
    await emulator.stop();
    const gone = await get(`${url}/healthz`);
    expect(gone.status).toBe(503);
    expect(gone.text).toMatch(/unreachable/);
  });
});
