import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { undoneByMap } from '../../src/journal/describe.js';
import { collectGarbage } from '../../src/journal/gc.js';
import { buildHistory, type History, type Operation } from '../../src/journal/history.js';
import { listSegments } from '../../src/journal/layout.js';
import { JournalDamagedError, readIntactJournal } from '../../src/journal/reader.js';
import { type JournalQuery, readJournalFor } from '../../src/journal/segment-index.js';
import { isWithin } from '../../src/core/paths.js';
import { openTestJournal, vfsFs } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/** What a command shows of the operations a query selects: identical whether read whole or through the index. */
function answer(h: History, q: JournalQuery) {
  const undone = undoneByMap(h.ops, h);
  const sel = (op: Operation) =>
    (q.session === undefined || op.session === q.session) &&
    (q.path === undefined || op.paths.some((p) => isWithin(p, q.path as string))) &&
    (q.fromSeq === undefined || op.seq >= q.fromSeq) &&
    (q.fromTime === undefined || op.time >= q.fromTime);
  return {
    ops: h.ops.filter(sel).map((op) => ({ seq: op.seq, status: op.status, after: op.after, capture: op.capture, endReason: op.endReason, undoneBy: undone.get(op.seq) })),
    firstSeq: h.firstSeq, lastSeq: h.lastSeq, split: [...h.possiblySplit], starts: h.starts.map((s) => s.session),
    rollbacks: [...h.rollbacks.keys()],
  };
}

describe('journal index: answers from the segments it names, identical to a whole read, never trusted over the segments', () => {
  let dir: string;
  let src: string;
  let state: string;
  let rollbackSession = '';
  let midTime = 0;
  const index = () => path.join(state, 'journal-index.json');
  const o = { racyMs: 0 };

  beforeEach(async () => {
    dir = makeTemp('jindex');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(path.join(src, 'a'), { recursive: true });
    fs.mkdirSync(path.join(src, 'b'), { recursive: true });
    let j = await openTestJournal(src, state, 's1');
    await vfsFs.write(j.vfs, '/a/x', 'x1');
    await vfsFs.write(j.vfs, '/a/y', 'y1');
    // a write session open across a segment roll: its end record lands in the next segment
    const fh = await j.vfs.open('/a/x', fs.constants.O_WRONLY);
    await j.vfs.write(fh, Buffer.from('X'), 1, 0);
    j.svc.writer.rollNow();
    await j.vfs.flush(fh);
    await j.vfs.release(fh);
    await j.close();
    j = await openTestJournal(src, state, 's2');
    await vfsFs.write(j.vfs, '/b/z', 'z');
    await j.close();
    await new Promise((r) => setTimeout(r, 5));
    midTime = Date.now();
    j = await openTestJournal(src, state, 's3');
    const r = await j.svc.rollback({ session: 's2' });
    rollbackSession = r.session as string;
    await j.close();
    j = await openTestJournal(src, state, 's4');
    await vfsFs.write(j.vfs, '/a/w', 'w');
    await vfsFs.write(j.vfs, '/c', 'c');
    await j.close();
  });
  afterEach(() => rmTemp(dir));

  const queries = (): JournalQuery[] => [
    { session: 's1' }, { session: 's2' }, { session: 's4' }, { session: rollbackSession }, { session: 'nobody' },
    { path: '/a' }, { path: '/b/z' }, { path: '/c' }, { path: '/a/x/deeper' }, { fromSeq: 3 }, { fromSeq: 100 }, { fromTime: midTime },
    { session: 's1', path: '/a/x' },
  ];

  const same = (q: JournalQuery) => expect(answer(readJournalFor(state, q, o).history, q), JSON.stringify(q)).toEqual(answer(buildHistory(readIntactJournal(state).records), q));

  it('gives the answers of a whole read, cold and warm, reading fewer segments', () => {
    expect(fs.existsSync(index())).toBe(false);
    for (const q of queries()) same(q);
    expect(fs.existsSync(index())).toBe(true);
    for (const q of queries()) same(q);
    const r = readJournalFor(state, { session: 's4' }, o);
    expect(r.segmentsTotal).toBe(listSegments(path.join(state, 'journal')).length);
    // s4's segment, plus the rollback's (read by every query: undos), not s1's or s2's
    expect(r.segmentsRead).toBeLessThan(r.segmentsTotal);
    expect(r.history.ops.some((op) => op.session === 's1')).toBe(false);
    // the write session whose end is in the next segment is whole
    const s1 = readJournalFor(state, { session: 's1' }, o).history.ops;
    expect(s1.every((op) => op.status === 'done')).toBe(true);
  });

  it('rebuilds a damaged index file, and says so', () => {
    readJournalFor(state, { session: 's1' }, o);
    const buf = fs.readFileSync(index());
    // flip a byte inside a session name: valid JSON, wrong content, caught by the checksum
    const at = buf.indexOf('"s4"');
    buf[at + 2] = '9'.charCodeAt(0);
    fs.writeFileSync(index(), buf);
    const said: string[] = [];
    expect(answer(readJournalFor(state, { session: 's4' }, { ...o, onRebuild: (w) => said.push(w) }).history, { session: 's4' }).ops.length).toBeGreaterThan(0);
    expect(said.join()).toMatch(/fails its checksum: rebuilding it from the segments/);
    for (const q of queries()) same(q);
    fs.writeFileSync(index(), 'garbage');
    for (const q of queries()) same(q);
    fs.writeFileSync(index(), '');
    for (const q of queries()) same(q);
  });

  it('sees a segment appended after indexing, and one that grew', async () => {
    for (const q of queries()) same(q);
    const j = await openTestJournal(src, state, 's5');
    await vfsFs.write(j.vfs, '/b/new', 'n');
    j.svc.writer.flush();
    // the segment being written: indexed now, then it grows
    expect(readJournalFor(state, { session: 's5' }, o).history.ops.map((op) => op.paths[0])).toContain('/b/new');
    same({ session: 's5' });
    await vfsFs.write(j.vfs, '/b/newer', 'n');
    j.svc.writer.flush();
    expect(readJournalFor(state, { session: 's5' }, o).history.ops.map((op) => op.paths[0])).toContain('/b/newer');
    same({ session: 's5' });
    same({ path: '/b' });
    await j.close();
    for (const q of [...queries(), { session: 's5' }, { path: '/b' }]) same(q);
  });

  it('follows a gc that rewrote and removed segments', () => {
    for (const q of queries()) same(q);
    const r = collectGarbage(state, Date.now() + 1000, null);
    expect(r.segmentsRemoved + r.segmentsRewritten).toBeGreaterThan(0);
    for (const q of queries()) same(q);
  });

  it('refuses a damaged segment the query does not read, as a whole read does, though the index was made before', () => {
    for (const q of queries()) same(q);
    const segs = listSegments(path.join(state, 'journal'));
    const s2seg = segs.find((s) => fs.readFileSync(s.path, 'utf8').includes('"session":"s2"') && !fs.readFileSync(s.path, 'utf8').includes('rollback-intent')) as { path: string };
    // same size, mtime put back: only the ctime (and the bytes) say it changed
    const st = fs.statSync(s2seg.path);
    const buf = fs.readFileSync(s2seg.path);
    const at = buf.indexOf('/b/z');
    buf[at + 3] = 'q'.charCodeAt(0);
    fs.writeFileSync(s2seg.path, buf);
    fs.utimesSync(s2seg.path, st.atime, st.mtime);
    let whole: Error | undefined;
    try {
      readIntactJournal(state);
    } catch (err) {
      whole = err as Error;
    }
    expect(whole).toBeInstanceOf(JournalDamagedError);
    expect(() => readJournalFor(state, { session: 's4' }, o)).toThrow(whole?.message as string);
    // cut short
    fs.writeFileSync(s2seg.path, buf.subarray(0, buf.length - 20));
    expect(() => readJournalFor(state, { session: 's1' }, o)).toThrow(JournalDamagedError);
    // gone
    fs.rmSync(s2seg.path);
    expect(() => readJournalFor(state, { session: 's1' }, o)).toThrow(/segment missing/);
  });
});
