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
