import fs from 'node:fs';
import { constants as C } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { undoneByMap } from '../../src/journal/describe.js';
import { collectGarbage } from '../../src/journal/gc.js';
import { buildHistory } from '../../src/journal/history.js';
import { stateLayout } from '../../src/journal/layout.js';
import { readJournal } from '../../src/journal/reader.js';
import { verifyJournal } from '../../src/journal/verify.js';
import type { RollbackRequest } from '../../src/journal/service.js';
import { openTestJournal, vfsFs, type TestJournal } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { snapshotTree } from '../helpers/tree.js';

describe('rollback on a Vfs (no mount)', () => {
  let dir: string;
  let src: string;
  let state: string;
  let j: TestJournal;
  beforeEach(async () => {
    dir = makeTemp('journal');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(path.join(src, 'docs'), { recursive: true });
    fs.writeFileSync(path.join(src, 'docs/a.txt'), 'alpha\n');
    fs.writeFileSync(path.join(src, 'docs/b.bin'), Buffer.alloc(3000, 7), { mode: 0o600 });
    fs.symlinkSync('docs/a.txt', path.join(src, 'link'));
    j = await openTestJournal(src, state);
  });
  afterEach(async () => {
    await j.close().catch(() => undefined);
    rmTemp(dir);
  });

  const tree = () => snapshotTree(src);
  const lastSeq = () => {
    j.svc.writer.flush();
    return buildHistory(readJournal(state).records).lastSeq;
  };
  const rollback = (req: RollbackRequest) => j.svc.rollback(req);

  /** Every kind of mutation, including the awkward ones. */
  async function busyDay(): Promise<void> {
    const { vfs } = j;
    await vfsFs.append(vfs, '/docs/a.txt', 'beta\n');
    await vfsFs.write(vfs, '/docs/a.txt', 'ALPHA', C.O_WRONLY, 0);
    await vfs.truncate('/docs/b.bin', 10);
    await vfs.mkdir('/new', 0o750);
    await vfsFs.write(vfs, '/new/n.txt', 'fresh');
    await vfs.link('/new/n.txt', '/new/hard');
    await vfsFs.append(vfs, '/new/hard', ' via the other name');
    await vfs.rename('/docs', '/archive'); // a directory with content, one record
    await vfs.rename('/new/n.txt', '/archive/a.txt'); // over an existing file
    await vfs.unlink('/link');
    await vfs.symlink('/elsewhere', '/link');
    await vfs.chmod('/archive/b.bin', 0o644);
    await vfs.chown('/archive/b.bin', 1234, 5678);
    await vfs.utimens('/archive/b.bin', { mtimeNs: 1_500_000_000_000_000_000n });
    await vfs.rmdir('/new').catch(() => undefined); // not empty: refused, nothing to undo
    await vfs.unlink('/new/hard');
    await vfs.rmdir('/new');
    await vfsFs.write(vfs, '/archive/a.txt', 'replaced wholesale', C.O_WRONLY | C.O_TRUNC);
  }

  it('restores the tree exactly as of any point, and the rollback can be rolled back', async () => {
    const t0 = tree();
    const s0 = lastSeq();
    await vfsFs.write(j.vfs, '/first.txt', 'one');
    const t1 = tree();
    const s1 = lastSeq();
    await busyDay();
    const t2 = tree();
    expect(t2).not.toEqual(t1);

    const r1 = await rollback({ toSeq: s1 });
    expect(r1.conflicts).toEqual([]);
    expect(r1.complete).toBe(true);
    expect(tree()).toEqual(t1);

    const r2 = await rollback({ session: r1.session as string });
    expect(r2.conflicts).toEqual([]);
    expect(tree()).toEqual(t2);

    const r3 = await rollback({ toSeq: s0 });
    expect(r3.conflicts).toEqual([]);
    expect(tree()).toEqual(t0);
    expect(fs.readFileSync(path.join(src, 'docs/a.txt'), 'utf8')).toBe('alpha\n');
    expect(fs.lstatSync(path.join(src, 'docs/b.bin')).uid).toBe(fs.lstatSync(path.join(src, 'docs')).uid);
    expect((await verifyJournal(state)).problems).toEqual([]);
  });

  it('a rollback that finished and was then rolled back itself is not reported as unfinished', async () => {
    await vfsFs.write(j.vfs, '/first.txt', 'one');
    const r1 = await rollback({ session: 'test-session' });
    expect(r1.complete).toBe(true);
    const r2 = await rollback({ session: r1.session as string });
    expect(r2.complete).toBe(true);
    expect(fs.existsSync(path.join(src, 'first.txt'))).toBe(true);
    const dry = await j.svc.rollback({ toSeq: lastSeq(), dryRun: true });
    expect(dry.unfinished).toBeUndefined();
  });

  it('rolls back by session, path and time, and not twice', async () => {
    await vfsFs.write(j.vfs, '/docs/a.txt', 'mine');
    await j.close();
    j = await openTestJournal(src, state, 'other-session');
    const before = tree();
    await vfsFs.write(j.vfs, '/docs/c.txt', 'theirs');
    await vfsFs.write(j.vfs, '/elsewhere.txt', 'theirs too');
    const t = Date.now();
    await new Promise((r) => setTimeout(r, 5));
    await vfsFs.write(j.vfs, '/late.txt', 'late');

    expect((await rollback({ toTime: t })).undone).toBe(1); // create (+ its first write) of /late.txt
    expect(fs.existsSync(path.join(src, 'late.txt'))).toBe(false);
    expect((await rollback({ session: 'other-session', path: '/docs' })).undone).toBe(1);
    expect(fs.existsSync(path.join(src, 'docs/c.txt'))).toBe(false);
    expect(fs.existsSync(path.join(src, 'elsewhere.txt'))).toBe(true);
    const again = await rollback({ session: 'other-session', path: '/docs' });
    expect(again.planned).toEqual([]);
    expect(again.alreadyUndone).toBe(1);
    await rollback({ session: 'other-session' });
    expect(tree()).toEqual(before);
    expect(fs.readFileSync(path.join(src, 'docs/a.txt'), 'utf8')).toBe('mine');
  });

  it('stops at a change made beside the journal and names it; --force overrides', async () => {
    const s = lastSeq();
    await vfsFs.write(j.vfs, '/docs/a.txt', 'journaled edit');
    await vfsFs.write(j.vfs, '/docs/new.txt', 'new');
    fs.writeFileSync(path.join(src, 'docs/a.txt'), 'edited beside the mount, same size?');

    const dry = await rollback({ toSeq: s, dryRun: true });
    expect(dry.planned.map((p) => p.op)).toEqual(['create', 'write']);
    expect(dry.conflicts.map((c) => c.path)).toEqual(['/docs/a.txt']);
    expect(dry.conflicts[0]?.reason).toMatch(/content changed since/);

    const r = await rollback({ toSeq: s });
    expect(r.undone).toBe(0); // refused before touching anything
    expect(r.conflicts).toHaveLength(1);
    expect(fs.existsSync(path.join(src, 'docs/new.txt'))).toBe(true);

    const f = await rollback({ toSeq: s, force: true });
    expect(f.complete).toBe(true);
    expect(f.forced.map((c) => c.path)).toEqual(['/docs/a.txt']);
    expect(fs.readFileSync(path.join(src, 'docs/a.txt'), 'utf8')).toBe('alpha\n');
    expect(fs.existsSync(path.join(src, 'docs/new.txt'))).toBe(false);
  });

  it('refuses to roll back a file a program is still writing', async () => {
    const s = lastSeq();
    const fh = await j.vfs.open('/docs/a.txt', C.O_WRONLY);
    await j.vfs.write(fh, Buffer.from('x'), 1, 0);
    const r = await rollback({ toSeq: s });
    expect(r.conflicts[0]?.reason).toMatch(/open and being written/);
    // --force restores it under the writer's feet; the undo is its own session, tagged as such
    const f = await rollback({ toSeq: s, force: true });
    expect(f.forced[0]?.reason).toMatch(/open and being written/);
    expect(fs.readFileSync(path.join(src, 'docs/a.txt'), 'utf8')).toBe('alpha\n');
    j.svc.writer.flush();
    const undoWrites = buildHistory(readJournal(state).records).ops.filter((o) => o.op === 'write' && o.undoes !== undefined);
    expect(undoWrites.map((o) => o.session)).toEqual([f.session]);
    await j.vfs.write(fh, Buffer.from('y'), 1, 0); // the program goes on: a new session
    await j.vfs.release(fh);
    expect((await rollback({ toSeq: s })).complete).toBe(true);
    expect(fs.readFileSync(path.join(src, 'docs/a.txt'), 'utf8')).toBe('alpha\n');
  });

  it('gc drops old history as a prefix and keeps numbering; verify finds damage', async () => {
    await vfsFs.write(j.vfs, '/docs/a.txt', 'v2');
    await vfsFs.write(j.vfs, '/docs/a.txt', 'v3');
    const all = lastSeq();
    await new Promise((r) => setTimeout(r, 5)); // the records' millisecond is in the past
    const r = await j.svc.gc(0); // keep nothing
    expect(r.droppedOperations).toBe(all);
    expect(r.blobsRemoved).toBeGreaterThan(0);
    await j.vfs.mkdir('/after-gc', 0o755);
    expect(lastSeq()).toBe(all + 1);
    const h = buildHistory(readJournal(state).records);
    expect(h.firstSeq).toBe(all + 1);
    await expect(rollback({ toSeq: 1 })).rejects.toThrow(/dropped by gc/);
    expect((await verifyJournal(state)).problems).toEqual([]);

    // damage: a blob that went missing, and a flipped byte in the middle of a segment
    await vfsFs.write(j.vfs, '/docs/a.txt', 'v4');
    await vfsFs.write(j.vfs, '/docs/a.txt', 'v5');
    await j.close();
    const h2 = buildHistory(readJournal(state).records);
    const blob = h2.ops.flatMap((o) => (o.capture ? [o.capture.blob] : [])).pop() as string;
    fs.rmSync(path.join(stateLayout(state).blobsDir, blob.slice(0, 2), blob.slice(2)));
    const seg = readJournal(state).segments.pop()?.path as string;
    const text = fs.readFileSync(seg, 'utf8').replace('"/after-gc"', '"/after-gX"');
    fs.writeFileSync(seg, text);
    const v = await verifyJournal(state);
    expect(v.problems.some((p) => /blob .* is missing/.test(p))).toBe(true);
    expect(v.problems.some((p) => /checksum mismatch/.test(p))).toBe(true);
  });

  it('resumes a rollback cut short: its own partial work is no conflict, and done counts once', async () => {
    const t0 = tree();
    const s0 = lastSeq();
    await vfsFs.write(j.vfs, '/docs/a.txt', 'rewritten by the session, longer than before');
    await vfsFs.write(j.vfs, '/made.txt', 'made by the session');
    await j.vfs.rename('/docs/b.bin', '/moved.bin');
    const ops = j.svc.history().ops.filter((o) => o.seq > s0).reverse();
    // a rollback killed part way: intent journaled; the rename undone and the create undone
    // (their changes made, no `restored` yet); the write's restore cut short half way
    j.svc.writer.appendNow({ kind: 'rollback-intent', time: Date.now(), session: 'rollback-killed', actor: 'rollback', target: `after #${s0}`, ops: ops.map((o) => o.seq) });
    const caller = { operator: true };
    for (const o of ops) {
      j.svc.stage.tag(caller, { session: 'rollback-killed', actor: 'rollback', undoes: o.seq });
      if (o.op === 'rename') await j.vfs.rename('/moved.bin', '/docs/b.bin', caller);
      if (o.op === 'create') await j.vfs.unlink('/made.txt', caller);
      if (o.op === 'write') await vfsFs.write(j.vfs, '/docs/a.txt', Buffer.alloc(6), C.O_WRONLY | C.O_TRUNC); // zeros, as a kill leaves
    }
    expect(tree()).not.toEqual(t0);
    // `log` does not call them undone either
    const cut = j.svc.history();
    expect(ops.filter((o) => undoneByMap(cut.ops, cut).has(o.seq))).toEqual([]);
    const dry = await rollback({ toSeq: s0, dryRun: true });
    expect(dry.conflicts).toEqual([]);
    expect(dry.unfinished).toEqual([expect.objectContaining({ session: 'rollback-killed', interrupted: true, restored: 0, total: ops.length })]);
    const r = await rollback({ toSeq: s0 });
    expect(r.conflicts).toEqual([]);
    expect(r.complete).toBe(true);
    expect(tree()).toEqual(t0);
    // done is done: nothing left, no earlier rollback reported as unfinished
    const again = await rollback({ toSeq: s0 });
    expect(again.planned).toEqual([]);
    expect(again.unfinished).toBeUndefined();
    const done = j.svc.history();
    expect(ops.filter((o) => undoneByMap(done.ops, done).has(o.seq))).toHaveLength(ops.length);
  });

  it('collectGarbage never drops a write session still open', async () => {
    const fh = await j.vfs.open('/docs/a.txt', C.O_WRONLY);
    await j.vfs.write(fh, Buffer.from('x'), 1, 0);
    j.svc.writer.rollNow();
    const r = collectGarbage(state, Date.now() + 1000, j.svc.writer.activeSegment);
    expect(r.droppedOperations).toBe(0);
    await j.vfs.release(fh);
  });
});
