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

describe('vfsOps: failures named by path', () => {
  it('a write or release failing on a handle is logged with the path the handle is on', async () => {
    const { vfsOps } = await import('../../src/fuse/adapter.js');
    const clock = { now: 0 };
    const { log, lines } = capture(clock);
    const open = new Map([[7, '/up.txt']]);
    const eio = () => Promise.reject(new VfsError('EIO', 'upload failed: GCS answered 503', { level: 'warn', cause: Object.assign(new Error('Service Unavailable'), { code: 503 }) }));
    // the Vfs surface the adapter uses for these ops; release forgets the handle first, as Vfs.release does
    const vfs = {
      backend: { capabilities: { xattrs: false } },
      pathOf: (fh: number) => open.get(fh) ?? null,
      write: eio,
      release: (fh: number) => (open.delete(fh), eio()),
    };
    const ops = vfsOps(vfs as never, log);
    await expect(ops.write({ pid: process.pid }, 7, Buffer.from('x'), 1, 0)).rejects.toThrow(/EIO/);
    await expect(ops.release({ pid: process.pid }, 7)).rejects.toThrow(/EIO/);
    expect(lines.map((l) => [l.op, l.path, l.errno, l.cause])).toEqual([
      ['write', '/up.txt', 'EIO', 'Error [503]: Service Unavailable'],
      ['release', '/up.txt', 'EIO', 'Error [503]: Service Unavailable'],
    ]);
  });
});
