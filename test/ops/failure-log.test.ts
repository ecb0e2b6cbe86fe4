import { afterEach, describe, expect, it } from 'vitest';
import { run, startMount, startTestEmulator, type TestEmulator, type TestMount } from '../helpers/mount.js';

/**
 * A backend outage under a mount (the emulator answering 503 to everything): programs get EIO,
 * and the operator gets log lines saying which op on which path failed, why, and for whom,
 * at most 10 a second however many requests fail.
 */
const BUCKET = 'ledgerfs-failure-log';

interface Line {
  level: number;
  time: number;
  msg: string;
  op?: string;
  path?: string;
  errno?: string;
  cause?: string;
  callerPid?: number;
  callerCmd?: string;
  suppressed?: number;
}

function lines(m: TestMount): Line[] {
  return m.logs().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);
}

async function fault(emulator: TestEmulator, spec: unknown): Promise<void> {
  const r = await fetch(`${emulator.url}/_emulator/faults`, { method: 'POST', body: JSON.stringify(spec) });
  if (!r.ok) throw new Error(`fault: ${r.status} ${await r.text()}`);
}

describe('unexpected failures in the log', () => {
  let m: TestMount | undefined;
  let emulator: TestEmulator | undefined;
  afterEach(async () => {
    await m?.stop();
    await emulator?.stop();
    m = undefined;
    emulator = undefined;
  });

  it('the emulator answering 503: warn lines naming op, path, errno, cause and caller; at most 10 a second', async () => {
    emulator = await startTestEmulator([BUCKET]);
    m = await startMount({ gcs: { emulator, bucket: BUCKET }, args: ['--metadata-ttl', '0', '--attr-timeout', '0', '--entry-timeout', '0', '--no-journal'] });
    await fault(emulator, { status: 503, count: -1 });
    // lookups failing after the backend's retries (about 2 s each: a storm of them is the unit
    // test's business, test/unit/failure-log.test.ts, with a clock it controls)
    const r = run('for i in $(seq 4); do stat -c %s "missing-$i.txt" >/dev/null 2>&1 & done; wait; stat lone.txt', m.mnt, { timeoutMs: 90_000 });
    expect(r.stderr).toMatch(/Input\/output error/);
    // the log reaches us once this (synchronous) test lets its event loop run; a suppressed count
    // goes out when the window frees, at most a second later
    await new Promise((res) => setTimeout(res, 1500));
    const failed = lines(m).filter((l) => l.msg === 'request failed');
    expect(failed.length).toBeGreaterThan(0);
    const first = failed[0] as Line;
    expect(first.level).toBe(40);
    expect(first.errno).toBe('EIO');
    expect(first.op).toMatch(/^(getattr|lookup)$/);
    expect(first.path).toMatch(/^\/(missing-\d+|lone)\.txt$/);
    expect(first.cause).toMatch(/503/);
    expect(first.callerPid).toBeGreaterThan(0);
    expect(first.callerCmd).toMatch(/stat/);

    const loud = lines(m).filter((l) => l.msg === 'request failed' || l.suppressed !== undefined);
    const suppressed = loud.reduce((n, l) => n + (l.suppressed ?? 0), 0);
    // every line a request failed is accounted for, once: logged or counted as suppressed
    expect(failed.length + suppressed).toBeGreaterThanOrEqual(5);
    // at most 10 lines in any one-second window
    let worst = 0;
    for (const l of loud) worst = Math.max(worst, loud.filter((o) => o.time >= l.time && o.time < l.time + 1000).length);
    expect(worst).toBeLessThanOrEqual(10);
  }, 120_000);
});
