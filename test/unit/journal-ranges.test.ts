import fs from 'node:fs';
import { constants as C } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../src/config/defaults.js';
import { buildHistory } from '../../src/journal/history.js';
import { readJournal } from '../../src/journal/reader.js';
import { verifyJournal } from '../../src/journal/verify.js';
import { openTestJournal, vfsFs, type TestJournal } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { snapshotTree } from '../helpers/tree.js';

/** Journals written before range before-images kept large files whole: they still roll back. */
describe('rollback of whole-file before-images of large files (journals before ranges)', () => {
  let dir: string;
  let src: string;
  let state: string;
  let j: TestJournal;
  const journal = DEFAULTS.journal as { extentBytes: number };
  const extent = journal.extentBytes;
  beforeEach(async () => {
    dir = makeTemp('journal');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
    for (const n of ['a', 'b', 'c']) fs.writeFileSync(path.join(src, n), Buffer.from(Array.from({ length: 5 * extent + 99 }, (_, i) => (i * 7 + n.charCodeAt(0)) & 0xff)));
    j = await openTestJournal(src, state);
  });
  afterEach(async () => {
    journal.extentBytes = extent;
    await j.close().catch(() => undefined);
    rmTemp(dir);
  });

  it('overwrite, truncate and unlink kept whole, rolled back by a journal that keeps ranges', async () => {
    const t0 = snapshotTree(src);
    // as a version-1 journal did: every file below the extent size, so kept whole
    journal.extentBytes = 1 << 30;
    const { vfs } = j;
    await vfsFs.write(vfs, '/a', 'overwritten', C.O_WRONLY, 3 * extent);
    await vfs.truncate('/b', 10);
    await vfs.unlink('/c');
    journal.extentBytes = extent;
    j.svc.writer.flush();
    const ops = buildHistory(readJournal(state).records).ops;
    expect(ops.some((o) => o.capture && !o.ranges)).toBe(true);
    expect(ops.every((o) => !o.ranges && o.before.every((b) => !b?.ranges))).toBe(true);
    const r = await j.svc.rollback({ toSeq: 0 });
    expect(r.conflicts).toEqual([]);
    expect(snapshotTree(src)).toEqual(t0);
    expect((await verifyJournal(state)).problems).toEqual([]);
  });

  it('the same changes kept by ranges keep a fraction of the bytes and roll back alike', async () => {
    const t0 = snapshotTree(src);
    const { vfs } = j;
    await vfsFs.write(vfs, '/a', 'overwritten', C.O_WRONLY, 3 * extent);
    await vfs.truncate('/b', 4 * extent + 10);
    j.svc.writer.flush();
    const ops = buildHistory(readJournal(state).records).ops;
    const a = ops.find((o) => o.paths[0] === '/a' && o.op === 'write');
    expect(a?.ranges?.map((r) => [r.offset, r.length])).toEqual([[3 * extent, extent]]);
    const b = ops.find((o) => o.paths[0] === '/b' && o.op === 'truncate');
    expect(b?.before[0]?.rangesFrom).toBe(4 * extent + 10);
    expect(b?.before[0]?.ranges?.reduce((n, r) => n + r.length, 0)).toBe(extent + 99 - 10);
    const r = await j.svc.rollback({ toSeq: 0 });
    expect(r.conflicts).toEqual([]);
    expect(snapshotTree(src)).toEqual(t0);
  });
});

/*
 * A write session that loses every old byte at once (O_TRUNC, ftruncate to 0) keeps one copy of
 * the file, as a small file is kept, not an extent at a time: a 512 MiB rewrite with dd took 18 s
 * of daemon CPU by extents (a SEEK_HOLE per extent, each scanning the rest of a tmpfs file)
 * against 1 s as one copy.
 */
describe('a write session that destroys every old byte keeps one copy', () => {
  let dir: string;
  let src: string;
  let state: string;
  let j: TestJournal;
  const extent = DEFAULTS.journal.extentBytes;
  const old = Buffer.from(Array.from({ length: 40 * extent + 123 }, (_, i) => (i * 13) & 0xff));
  beforeEach(async () => {
    dir = makeTemp('journal');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
    fs.writeFileSync(path.join(src, 'big'), old);
    fs.writeFileSync(path.join(src, 'big2'), old);
    j = await openTestJournal(src, state);
  });
  afterEach(async () => {
    await j.close().catch(() => undefined);
    rmTemp(dir);
  });

  it('ftruncate to 0 then a rewrite, and a rewrite from 0 over part: one capture, then ranges; rollback exact', async () => {
    const t0 = snapshotTree(src);
    const { vfs } = j;
    // open without O_TRUNC, cut to 0 through the handle, write new bytes: every old byte gone at once
    const fh = await vfs.open('/big', C.O_WRONLY);
    await vfs.ftruncate(fh, 0);
    await vfs.write(fh, Buffer.from('new content'), 11, 0);
    await vfs.flush(fh);
    await vfs.release(fh);
    // an overwrite of a few extents in the middle: ranges, as before
    await vfsFs.write(vfs, '/big2', Buffer.alloc(3 * extent, 1), C.O_WRONLY, 10 * extent);
    j.svc.writer.flush();
    const records = readJournal(state).records.map((r) => r.record as { kind: string; of?: number; offset?: number; blob?: string });
    const ops = buildHistory(readJournal(state).records).ops;
    const big = ops.find((o) => o.paths[0] === '/big' && o.op === 'write');
    const big2 = ops.find((o) => o.paths[0] === '/big2' && o.op === 'write');
    expect(records.filter((r) => r.kind === 'range' && r.of === big?.seq)).toEqual([]);
    expect(records.filter((r) => r.kind === 'capture' && r.of === big?.seq)).toHaveLength(1);
    expect(records.filter((r) => r.kind === 'range' && r.of === big2?.seq).map((r) => r.offset)).toEqual([10 * extent, 11 * extent, 12 * extent]);
    expect(fs.readFileSync(path.join(src, 'big'), 'utf8')).toBe('new content');
    const r = await j.svc.rollback({ toSeq: 0 });
    expect(r.conflicts).toEqual([]);
    expect(snapshotTree(src)).toEqual(t0);
    expect((await verifyJournal(state)).problems).toEqual([]);
  });
});
