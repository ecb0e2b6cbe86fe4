import fs from 'node:fs';
import { constants as C } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { encodeRecord } from '../../src/journal/codec.js';
import { buildHistory, type Operation } from '../../src/journal/history.js';
import { listSegments, stateLayout } from '../../src/journal/layout.js';
import { readJournal } from '../../src/journal/reader.js';
import { asIfKilled, openTestJournal, vfsFs, type TestJournal } from '../helpers/journal.js';
import { expectCode, makeTemp, rmTemp } from '../helpers/tmp.js';

describe('journal stage', () => {
  let dir: string;
  let src: string;
  let state: string;
  let j: TestJournal;
  beforeEach(async () => {
    dir = makeTemp('journal');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
    fs.writeFileSync(path.join(src, 'old.txt'), 'old content\n');
    j = await openTestJournal(src, state);
  });
  afterEach(async () => {
    await j.close().catch(() => undefined);
    rmTemp(dir);
  });

  const history = () => {
    j.svc.writer.flush(); // outcomes wait in a buffer for the next intent
    return buildHistory(readJournal(state).records);
  };
  const ops = () => history().ops;
  const byOp = (name: string) => ops().filter((o) => o.op === name);

  it('records one operation per mutation, with before and after states', async () => {
    const { vfs } = j;
    await vfs.mkdir('/d', 0o755);
    await vfsFs.write(vfs, '/d/new.txt', 'hello');
    await vfs.rename('/d/new.txt', '/d/moved.txt');
    await vfs.symlink('moved.txt', '/d/link');
    await vfs.link('/d/moved.txt', '/d/hard');
    await vfs.chmod('/d/moved.txt', 0o600);
    await vfs.utimens('/d/moved.txt', { mtimeNs: 1_000_000_000_000_000_000n });
    await vfs.unlink('/d/link');
    // create + first write + close is one record: the session continues the create's
    expect(ops().map((o) => `${o.op} ${o.paths.join(' ')}`)).toEqual([
      'mkdir /d', 'create /d/new.txt', 'rename /d/new.txt /d/moved.txt', 'symlink /d/link',
      'link /d/hard /d/moved.txt', 'chmod /d/moved.txt', 'utimens /d/moved.txt', 'unlink /d/link',
    ]);
    const [create] = byOp('create');
    expect([create?.before[0], create?.after?.[0]?.size, create?.endReason]).toEqual([null, 5, 'close']);
    for (const o of ops()) {
      expect(o.status).toBe('done');
      expect(o.session).toBe('test-session');
      expect(o.seq).toBeGreaterThan(0);
    }
    const [rename] = byOp('rename') as [Operation];
    expect(rename.before[0]?.size).toBe(5);
    expect(rename.before[1]).toBeNull();
    expect(rename.after?.[0]).toBeNull();
    expect(rename.after?.[1]?.ino).toBe(rename.before[0]?.ino);
    expect(byOp('chmod')[0]?.after?.[0]?.mode).toBe(0o600);
    expect(byOp('unlink')[0]?.before[0]?.target).toBe('moved.txt');
    expect(byOp('utimens')[0]?.before[0]?.atimeNs).toBeDefined();
  });

  it('keeps a before-image only of content a mutation destroys', async () => {
    const { vfs } = j;
    await vfsFs.append(vfs, '/old.txt', 'appended\n'); // appends destroy nothing
    let w = byOp('write');
    expect(w).toHaveLength(1);
    expect(w[0]?.capture).toBeUndefined();
    expect(w[0]?.before[0]?.size).toBe(12);
    expect(w[0]?.after?.[0]?.size).toBe(21);

    await vfsFs.write(vfs, '/old.txt', 'X', C.O_WRONLY, 0); // overwrite: the old bytes are kept
    w = byOp('write');
    const cap = w[1]?.capture;
    expect(cap?.size).toBe(21);
    expect(j.svc.blobs.read(cap?.blob as string).toString()).toBe('old content\nappended\n');

    await vfs.truncate('/old.txt', 3); // by path, not open: shrinking keeps the file
    const t = byOp('truncate')[0];
    expect(j.svc.blobs.read(t?.before[0]?.blob as string).toString()).toBe('Xld content\nappended\n');

    await vfsFs.write(vfs, '/victim', 'replaced content');
    await vfsFs.write(vfs, '/new', 'n');
    await vfs.rename('/new', '/victim'); // renamed over: the replaced file is kept
    const r = byOp('rename')[0];
    expect(j.svc.blobs.read(r?.before[1]?.blob as string).toString()).toBe('replaced content');

    await vfs.unlink('/old.txt');
    const u = byOp('unlink')[0];
    expect(j.svc.blobs.read(u?.before[0]?.blob as string).toString()).toBe('Xld');
  });

  it('makes a write session of open..close, captured once however many writes', async () => {
    const { vfs } = j;
    const fh = await vfs.open('/old.txt', C.O_WRONLY);
    for (let i = 0; i < 20; i++) await vfs.write(fh, Buffer.from('ab'), 2, i * 2);
    await vfs.flush(fh);
    await vfs.release(fh);
    const w = byOp('write');
    expect(w).toHaveLength(1);
    expect(readJournal(state).records.filter((r) => r.record.kind === 'capture')).toHaveLength(1);
    expect(w[0]?.endReason).toBe('close');
    expect(w[0]?.after?.[0]?.size).toBe(40);
  });

  it('splits a session at a mutation of the same file (cp -p sets times while open)', async () => {
    const { vfs } = j;
    const fh = await vfs.create('/copy', 0o644, C.O_WRONLY | C.O_CREAT);
    await vfs.write(fh, Buffer.from('data'), 4, 0);
    await vfs.utimens('/copy', { mtimeNs: 1_600_000_000_000_000_000n });
    await vfs.chmod('/copy', 0o640);
    await vfs.write(fh, Buffer.from('more'), 4, 4);
    await vfs.release(fh);
    expect(ops().map((o) => `${o.op}${o.endReason ? `(${o.endReason})` : ''}`)).toEqual([
      'create(split)', 'utimens', 'chmod', 'write(close)',
    ]);
  });

  it('records refused mutations as failed, and nothing else', async () => {
    await expectCode(j.vfs.rmdir('/nope'), 'ENOENT');
    const o = ops();
    expect(o).toHaveLength(1);
    expect(o[0]?.status).toBe('failed');
    expect(o[0]?.errno).toBe('ENOENT');
  });

  it('resolves operations a crash left without an outcome on the next start', async () => {
    const { vfs } = j;
    await vfsFs.write(vfs, '/a', 'aaaa');
    j.svc.writer.flush();
    await j.svc.close();
    const seg = asIfKilled(state); // nothing more is written, its segment is left open, its lock is stale
    const h = history();
    const ino = (p: string) => fs.lstatSync(path.join(src, p)).ino;
    let seq = h.lastSeq;
    const base = { kind: 'op' as const, time: Date.now(), session: 'crashed', actor: 'test' };
    // an unlink that reached the backend, one that did not, and a write session left open
    fs.unlinkSync(path.join(src, 'a'));
    fs.appendFileSync(seg, encodeRecord({ ...base, seq: ++seq, op: 'unlink', paths: ['/a'], before: [{ type: 'file', mode: 0o644, uid: 0, gid: 0, size: 4, mtimeNs: '1', ino: 1, nlink: 1 }] }));
    fs.appendFileSync(seg, encodeRecord({ ...base, seq: ++seq, op: 'unlink', paths: ['/old.txt'], before: [{ type: 'file', mode: 0o644, uid: 0, gid: 0, size: 12, mtimeNs: '1', ino: ino('old.txt'), nlink: 1 }] }));
    fs.appendFileSync(seg, encodeRecord({ ...base, seq: ++seq, op: 'write', paths: ['/old.txt'], before: [{ type: 'file', mode: 0o644, uid: 0, gid: 0, size: 12, mtimeNs: '1', ino: ino('old.txt'), nlink: 1 }] }));
    fs.appendFileSync(seg, '0000 {"kind":"op","se'); // and a torn last record

    j = await openTestJournal(src, state);
    expect(j.svc.startNote).toMatch(/cut a torn record/);
    expect(j.svc.startNote).toMatch(/closed .*which its writer left open \(a crash\)/);
    expect(readJournal(state).problems).toEqual([]);
    expect(j.svc.startNote).toMatch(/1 operation\(s\) had reached the backend, 1 had not, 1 write session\(s\) ended/);
    const after = history();
    const [u1, u2, w] = after.ops.slice(-3) as [Operation, Operation, Operation];
    expect([u1.status, u1.recovered]).toEqual(['done', true]);
    expect(u2.status).toBe('failed');
    expect([w.status, w.endReason]).toEqual(['done', 'recovered']);
    expect(readJournal(state).tornTail).toBeNull();
    // numbering goes on after the cut
    await j.vfs.mkdir('/later', 0o755);
    expect(history().lastSeq).toBe(seq + 1);
  });

  it('refuses a second writer while one holds the journal', async () => {
    await expect(openTestJournal(src, state)).rejects.toThrow(/in use by pid/);
  });
});
