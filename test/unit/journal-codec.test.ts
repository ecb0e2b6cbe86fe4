import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { encodeRecord, scanSegment } from '../../src/journal/codec.js';
import { crc32c } from '../../src/journal/crc32c.js';
import { listSegments } from '../../src/journal/layout.js';
import { readJournal } from '../../src/journal/reader.js';
import type { JournalRecord } from '../../src/journal/record.js';
import { JournalWriter } from '../../src/journal/writer.js';
import { silentLogger } from '../../src/core/log.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

const op = (seq: number): JournalRecord => ({
  kind: 'op', seq, time: 1_700_000_000_000 + seq, session: 's', actor: 'a', op: 'create', paths: [`/f${seq}`], before: [null],
});

describe('journal codec', () => {
  it('crc32c matches the standard check value', () => {
    expect(crc32c(Buffer.from('123456789')).toString(16)).toBe('e3069283');
    expect(crc32c(Buffer.alloc(0))).toBe(0);
    // the 8-byte-at-a-time path and the byte path agree on every length and offset
    const data = Buffer.from(Array.from({ length: 100 }, (_, i) => (i * 37) & 0xff));
    for (let n = 0; n < 40; n++) {
      let c = 0xffffffff;
      for (let i = 3; i < 3 + n; i++) {
        c ^= data[i] as number;
        for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
      }
      expect(crc32c(data, 3, 3 + n)).toBe((c ^ 0xffffffff) >>> 0);
    }
  });

  it('keeps times before 1970 and after 2262 (a clean record is never taken for a torn one)', () => {
    const state = (mtimeNs: string, atimeNs: string) => ({ type: 'file' as const, mode: 0o644, uid: 0, gid: 0, size: 1, mtimeNs, atimeNs, ino: 5, nlink: 1 });
    const rec: JournalRecord = {
      kind: 'op', seq: 1, time: 1, session: 's', actor: 'a', op: 'utimens', paths: ['/f'],
      before: [state('-2208988799876543211', '-1')], // 1900-01-01 00:00:00.123456789, 1969-12-31 23:59:59.999999999
    };
    const done: JournalRecord = { kind: 'done', of: 1, time: 2, after: [state('10413792000000000001', '10413792000000000001')] }; // 2300
    const scan = scanSegment(Buffer.concat([encodeRecord(rec), encodeRecord(done)]));
    expect(scan.lines.map((l) => l.record)).toEqual([rec, done]);
    expect(scan.problems).toEqual([]);
    expect(scan.tornTail).toBeNull();
  });

  it('round-trips records, one line each', () => {
    const lines = [op(1), op(2), { kind: 'done', of: 1, time: 5, after: [null] } as JournalRecord].map((r) => encodeRecord(r).toString());
    for (const l of lines) expect(l.endsWith('\n') && !l.slice(0, -1).includes('\n')).toBe(true);
    const scan = scanSegment(Buffer.from(lines.join('')));
    expect(scan.lines.map((l) => l.record)).toEqual([op(1), op(2), { kind: 'done', of: 1, time: 5, after: [null] }]);
    expect(scan.problems).toEqual([]);
    expect(scan.tornTail).toBeNull();
  });

  it('tells a torn tail from damage in the middle', () => {
    const enc = (r: JournalRecord) => encodeRecord(r).toString();
    const good = enc(op(1)) + enc(op(2));
    const partial = enc(op(3)).slice(0, 20);
    const t = scanSegment(Buffer.from(good + partial));
    expect(t.lines).toHaveLength(2);
    expect(t.tornTail).toEqual({ offset: Buffer.byteLength(good), bytes: 20, reason: 'incomplete last line' });
    expect(t.problems).toEqual([]);

    // a whole last line with a flipped byte is a torn tail too (the write was cut mid-page)
    const last = enc(op(3)).replace('"seq":3', '"seq":4');
    expect(scanSegment(Buffer.from(good + last)).tornTail?.reason).toBe('checksum mismatch');

    // damage followed by good records is not cut: it is reported
    const mid = enc(op(1)) + enc(op(2)).replace('/f2', '/x2') + enc(op(3));
    const m = scanSegment(Buffer.from(mid));
    expect(m.lines.map((l) => (l.record as { seq: number }).seq)).toEqual([1, 3]);
    expect(m.problems).toHaveLength(1);
    expect(m.problems[0]?.reason).toBe('checksum mismatch');
    expect(m.tornTail).toBeNull();
  });

  it('rejects records this version does not understand, even with a good checksum', () => {
    const json = JSON.stringify({ kind: 'op', seq: 'x' });
    const line = crc32c(Buffer.from(json)).toString(16).padStart(8, '0') + ' ' + json + '\n';
    const s = scanSegment(Buffer.concat([Buffer.from(line), encodeRecord(op(2))]));
    expect(s.problems[0]?.reason).toMatch(/not a record this version understands/);
  });
});

describe('journal writer', () => {
  let dir: string;
  beforeEach(() => {
    dir = makeTemp('journal');
  });
  afterEach(() => rmTemp(dir));

  const open = (last = 0, segmentBytes = 1 << 20) =>
    JournalWriter.open({ journalDir: path.join(dir, 'journal'), segmentBytes, syncIntervalMs: 10, flushDelayMs: 1, log: silentLogger }, last);

  it('writes intents at once and outcomes soon, in order', async () => {
    const w = open();
    const seq = w.nextSeq();
    w.appendNow(op(seq));
    w.appendSoon({ kind: 'done', of: seq, time: 1, after: [null] });
    // the intent is in the file before appendNow returns; the outcome may still be buffered
    expect(readJournal(dir).records.map((r) => r.record.kind)).toEqual(['segment', 'op']);
    w.appendNow(op(w.nextSeq())); // carries the buffered outcome with it
    expect(readJournal(dir).records.map((r) => r.record.kind)).toEqual(['segment', 'op', 'done', 'op']);
    await w.sync();
    await w.close();
  });

  it('rolls segments at the size limit and reads them back in order', async () => {
    const w = open(0, 600);
    for (let i = 0; i < 20; i++) w.appendNow(op(w.nextSeq()));
    await w.close();
    const segs = listSegments(path.join(dir, 'journal'));
    expect(segs.length).toBeGreaterThan(3);
    for (const s of segs.slice(0, -1)) expect(fs.statSync(s.path).size).toBeGreaterThanOrEqual(600);
    const j = readJournal(dir);
    expect(j.records.filter((r) => r.record.kind === 'op').map((r) => (r.record as { seq: number }).seq)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(j.problems).toEqual([]);
    // each segment is framed: its own `segment` record first, a `close` record last
    for (const s of segs) {
      const kinds = j.records.filter((r) => r.segment === s.index).map((r) => r.record.kind);
      expect([kinds[0], kinds[kinds.length - 1]]).toEqual(['segment', 'close']);
    }
    // a reopened writer starts a segment of its own, with the next seq
    const w2 = open(20, 600);
    expect(w2.nextSeq()).toBe(21);
    expect(w2.activeSegment).toBe(segs.length + 1);
    await w2.close();
  });

  it('batches concurrent syncs (group commit)', async () => {
    const w = open();
    for (let i = 0; i < 50; i++) w.appendNow(op(w.nextSeq()));
    await Promise.all(Array.from({ length: 20 }, () => w.sync()));
    await w.close();
    expect(readJournal(dir).records.filter((r) => r.record.kind === 'op')).toHaveLength(50);
  });
});
