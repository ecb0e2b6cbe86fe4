import fs from 'node:fs';
import { constants as C } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LocalBackend } from '../../src/backend/index.js';
import { openTestJournal, type TestJournal } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * An O_EXCL create succeeds only where nothing was, so the journal takes "nothing" as its
 * before-state without a look at the name (tar, git and editors' temp files create this way;
 * the kernel's LOOKUP has just missed the name). One that finds a file there fails with EEXIST,
 * journaled as failed, the file untouched. Without O_EXCL the name is still looked at: O_TRUNC
 * on a file that appeared meanwhile must keep its content.
 */
describe('journal: the before-state of a create', () => {
  let dir: string;
  let src: string;
  let j: TestJournal;
  let looked: string[];
  beforeEach(async () => {
    dir = makeTemp('create-excl');
    src = path.join(dir, 'src');
    fs.mkdirSync(src);
    j = await openTestJournal(src, path.join(dir, 'state'));
    looked = [];
    const b = j.backend as LocalBackend;
    const stat = b.stat.bind(b);
    const tryStat = b.tryStat.bind(b);
    b.stat = (p: string) => (looked.push(p), stat(p));
    b.tryStat = (p: string) => (looked.push(p), tryStat(p));
  });
  afterEach(async () => {
    await j.close().catch(() => undefined);
    rmTemp(dir);
  });

  const createRecords = () => j.svc.history().ops.filter((o) => o.op === 'create');

  it('O_EXCL: no look at the name; the record says nothing was there', async () => {
    const fh = await j.vfs.create('/new', 0o644, C.O_WRONLY | C.O_CREAT | C.O_EXCL);
    await j.vfs.release(fh);
    expect(looked).not.toContain('/new');
    const [op] = createRecords();
    expect(op).toMatchObject({ paths: ['/new'], before: [null], status: 'done' });
  });

  it('O_EXCL over a file that appeared beside the mount: EEXIST, journaled as failed, the file untouched', async () => {
    fs.writeFileSync(path.join(src, 'there'), 'kept');
    await expect(j.vfs.create('/there', 0o644, C.O_WRONLY | C.O_CREAT | C.O_EXCL)).rejects.toMatchObject({ code: 'EEXIST' });
    expect(fs.readFileSync(path.join(src, 'there'), 'utf8')).toBe('kept');
    const [op] = createRecords();
    expect(op).toMatchObject({ paths: ['/there'], status: 'failed', errno: 'EEXIST' });
  });

  it('O_TRUNC without O_EXCL over a file that appeared: its content is kept for the rollback', async () => {
    fs.writeFileSync(path.join(src, 'there'), 'kept');
    const fh = await j.vfs.create('/there', 0o644, C.O_WRONLY | C.O_CREAT | C.O_TRUNC);
    await j.vfs.release(fh);
    expect(looked).toContain('/there');
    expect(fs.readFileSync(path.join(src, 'there'), 'utf8')).toBe('');
    const [op] = createRecords();
    expect(op?.before[0]).toMatchObject({ type: 'file', size: 4 });
    await j.svc.rollback({ toSeq: (op?.seq as number) - 1 });
    expect(fs.readFileSync(path.join(src, 'there'), 'utf8')).toBe('kept');
  });
});
