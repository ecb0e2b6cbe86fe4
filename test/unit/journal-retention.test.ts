import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseMountFile } from '../../src/config/load.js';
import { collectGarbage } from '../../src/journal/gc.js';
import { buildHistory } from '../../src/journal/history.js';
import { readIntactJournal } from '../../src/journal/reader.js';
import { journalBytes, RetentionRunner } from '../../src/journal/retention.js';
import { openTestJournal, vfsFs, type TestJournal } from '../helpers/journal.js';
import { CLI } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/** A logger whose lines the test reads. */
function captureLogger() {
  const lines: { level: number; msg: string }[] = [];
  const log = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as { level: number; msg: string }) });
  return { log, lines };
}

describe('journal retention: gc --max-bytes, the mount file journal: block, never the mounted session', () => {
  let dir: string;
  let src: string;
  let state: string;
  let live: TestJournal | null = null;
  const sessionsLeft = () => [...new Set(buildHistory(readIntactJournal(state).records).ops.map((op) => op.session))];

  beforeEach(async () => {
    dir = makeTemp('retention');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
    const big = Buffer.alloc(100_000, 'x');
    for (const s of ['old-1', 'old-2']) {
      const j = await openTestJournal(src, state, s);
      await vfsFs.write(j.vfs, `/${s}.bin`, big);
      await vfsFs.write(j.vfs, `/${s}.bin`, Buffer.alloc(100_000, 'y')); // a before-image of 100 KB
      await j.close();
    }
  });
  afterEach(async () => {
    await live?.close().catch(() => undefined);
    live = null;
    rmTemp(dir);
  });

  it('--max-bytes drops the oldest whole sessions, as few as the bound needs', () => {
    const before = journalBytes(state);
    const dry = collectGarbage(state, 0, null, { dryRun: true, maxBytes: before - 1 });
    expect(dry.droppedSessions).toEqual(['old-1']);
    expect(dry.bytesBefore).toBe(before);
    expect(sessionsLeft()).toEqual(['old-1', 'old-2']);
    const r = collectGarbage(state, 0, null, { maxBytes: before - 1 });
    expect(r.droppedSessions).toEqual(['old-1']);
    expect(sessionsLeft()).toEqual(['old-2']);
    expect(journalBytes(state)).toBeLessThanOrEqual(before - 1);
    expect(journalBytes(state)).toBe(before - r.bytesFreed);
    // within the bound: nothing goes
    expect(collectGarbage(state, 0, null, { maxBytes: journalBytes(state) }).droppedOperations).toBe(0);
  });

  it('the mount applies it in the background, never dropping its own session, and logs what it dropped', async () => {
    live = await openTestJournal(src, state, 'mounted');
    await vfsFs.write(live.vfs, '/mine.bin', Buffer.alloc(50_000, 'z'));
    const { log, lines } = captureLogger();
    const runner = new RetentionRunner(live.svc, state, { maxBytes: 1 }, log);
    const r = await runner.runOnce();
    expect(r?.droppedSessions.sort()).toEqual(['old-1', 'old-2']);
    expect(sessionsLeft()).toEqual(['mounted']);
    expect(r?.stoppedAt?.reason).toMatch(/still mounted/);
    const text = lines.map((l) => l.msg).join('\n');
    expect(text).toMatch(/journal retention: dropped 2 session\(s\) \(old-1, old-2\)/);
    expect(text).toMatch(/over journal.maxBytes 1: dropping stopped at #\d+ \(session mounted: the session is still mounted\)/);
    // still over the bound, but nothing more may go: one more pass finds that, and leaves no record
    const starts = () => readIntactJournal(state).records.filter((x) => x.record.kind === 'start').length;
    const n = starts();
    const second = await runner.runOnce();
    expect(second?.droppedOperations).toBe(0);
    expect(starts()).toBe(n);
    // then the same journal is not gone over again
    expect(await runner.runOnce()).toBeNull();
    // keep: everything younger stays
    expect(await new RetentionRunner(live.svc, state, { keepMs: 3_600_000 }, log).runOnce()).toBeNull();
  });

  it('keep and maxBytes in a mount file; default keeps everything', () => {
    const base = 'backend: {type: local, path: /w}\nroots: [{path: /a, mode: rw}]\n';
    expect(parseMountFile(`${base}journal: {maxBytes: 2GiB, keep: 30d}\n`, 'm.yaml', '/').journal).toEqual({ maxBytes: 2 * 1024 ** 3, keepMs: 30 * 86_400_000 });
    expect(parseMountFile(base, 'm.yaml', '/').journal).toBeUndefined();
    expect(() => parseMountFile(`${base}journal: {keep: forever}\n`, 'm.yaml', '/')).toThrow(/expected a duration like "30m"/);
    expect(() => parseMountFile(`${base}journal: {maxbytes: 1}\n`, 'm.yaml', '/')).toThrow(/maxbytes/);
  });

  it('gc --max-bytes on the command line (with --keep, and alone); neither is a usage error', () => {
    const cli = (...args: string[]) => spawnSync(process.execPath, [CLI, 'gc', ...args, '--source', src, '--state', state], { encoding: 'utf8' });
    const none = cli();
    expect(none.status).toBe(2);
    expect(none.stderr).toMatch(/--keep DURATION and\/or --max-bytes SIZE/);
    expect(cli('--max-bytes', 'lots').stderr).toMatch(/--max-bytes: expected a size/);
    const dry = cli('--max-bytes', '1', '--keep', '30d', '--dry-run');
    expect(dry.status).toBe(0);
    expect(dry.stdout).toMatch(/Would drop 2 session\(s\)/);
    expect(dry.stdout).toMatch(/--max-bytes 1: over it, as far as whole sessions allow|would be \d+/);
    const real = cli('--max-bytes', '1');
    expect(real.status, real.stderr).toBe(0);
    expect(real.stdout).toMatch(/Dropped 2 session\(s\)/);
  });
});
