import pino from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { VfsError } from '../../src/core/errors.js';
import { toVfsError } from '../../src/backend/gcs/errors.js';
import { FailureLog } from '../../src/fuse/failure-log.js';

interface Line {
  level: number;
  msg: string;
  t: number;
  op?: string;
  path?: string;
  errno?: string;
  cause?: string;
  suppressed?: number;
}

function capture(clock: { now: number }) {
  const lines: Line[] = [];
  const log = pino({ level: 'info' }, { write: (s: string) => void lines.push({ ...(JSON.parse(s) as Line), t: clock.now }) });
  return { log, lines };
}

describe('FailureLog', () => {
  it('logs an unexpected backend failure at warn with op, path, errno and cause; expected answers not at all', () => {
    const clock = { now: 0 };
    const { log, lines } = capture(clock);
    const f = new FailureLog(log, 10, () => clock.now);
    const http503 = Object.assign(new Error('Service Unavailable'), { code: 503 });
    expect(f.report('getattr', '/a.txt', {}, toVfsError(http503, 'look up /a.txt'))).toBe(true);
    expect(f.report('getattr', '/b.txt', {}, new VfsError('ENOENT', 'no such file'))).toBe(false);
    expect(f.report('create', '/c.txt', {}, new VfsError('EACCES', 'read-only root'))).toBe(false);
    expect(f.report('write', null, {}, new TypeError('bug'))).toBe(true);
    expect(lines.map((l) => [l.level, l.op, l.path, l.errno])).toEqual([[40, 'getattr', '/a.txt', 'EIO'], [50, 'write', null, 'EIO']]);
    expect(lines[0]?.cause).toBe('Error [503]: Service Unavailable');
  });

  it('a storm: at most 10 lines in any second, the rest counted in "N more suppressed" lines', () => {
    vi.useFakeTimers();
    try {
      const clock = { now: 1_000_000 };
      const { log, lines } = capture(clock);
      const f = new FailureLog(log, 10, () => clock.now);
      const err = new VfsError('EIO', 'GCS answered 503', { level: 'warn' });
      // 5000 failures over 5 s, one a millisecond
      for (let i = 0; i < 5000; i++) {
        f.report('getattr', `/f${i}`, {}, err);
        clock.now += 1;
        vi.advanceTimersByTime(1);
      }
      clock.now += 2000;
      vi.advanceTimersByTime(2000);
      f.close();
      const logged = lines.filter((l) => l.msg === 'request failed').length;
      const suppressed = lines.reduce((n, l) => n + (l.suppressed ?? 0), 0);
      expect(logged + suppressed).toBe(5000);
      expect(lines.some((l) => /^\d+ more failed requests suppressed/.test(l.msg))).toBe(true);
      for (const l of lines) expect(lines.filter((o) => o.t >= l.t && o.t < l.t + 1000).length).toBeLessThanOrEqual(10);
      // and it is not silent: about 10 a second got out
      expect(lines.length).toBeGreaterThanOrEqual(50);
    } finally {
      vi.useRealTimers();
    }
  });
});
