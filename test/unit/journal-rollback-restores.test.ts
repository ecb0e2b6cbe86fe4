import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildHistory } from '../../src/journal/history.js';
import { readJournal } from '../../src/journal/reader.js';
import { verifyJournal } from '../../src/journal/verify.js';
import { openTestJournal, vfsFs, type TestJournal } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * What a removal takes besides the bytes, and a rollback must bring back with the node: its
 * user.* xattrs, its own mtime (directories, symlinks and FIFOs as well as files), the mtime
 * of the directory it was in, and setuid bits that a chown (the journaled one, or the
 * rollback's own) cleared. Found by running rsync -aHAX, rm -rf and rollback against a plain
 * copy: each of these came back different.
 */

const isRoot = process.getuid?.() === 0;
const T2001 = 978_307_200_000_000_000n; // 2001-01-01T00:00:00Z, ns
const T2002 = T2001 + 31_536_000_000_000_000n + 123_456_789n;
const T2003 = T2002 + 31_536_000_000_000_000n + 42n;
const T2004 = T2003 + 31_536_000_000_000_000n + 7n;

/** python's os module: xattrs and lutimes, which Node's fs lacks */
const py = (code: string, ...args: string[]) => execFileSync('python3', ['-c', code, ...args], { encoding: 'utf8' });
const setXattr = (p: string, name: string, value: string) => py('import os,sys; os.setxattr(sys.argv[1], sys.argv[2], sys.argv[3].encode())', p, name, value);
const xattrsOf = (p: string): Record<string, string> =>
  JSON.parse(py('import os,sys,json; print(json.dumps({n: os.getxattr(sys.argv[1], n).decode() for n in os.listxattr(sys.argv[1])}))', p)) as Record<string, string>;
const setTime = (p: string, ns: bigint) => py('import os,sys; n=int(sys.argv[2]); os.utime(sys.argv[1], ns=(n, n), follow_symlinks=False)', p, ns.toString());
const mtimeOf = (p: string) => fs.lstatSync(p, { bigint: true }).mtimeNs;

describe('rollback brings back what a removal took (no mount)', () => {
  let dir: string;
  let src: string;
  let state: string;
  let j: TestJournal;
  beforeEach(async () => {
    dir = makeTemp('journal');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(path.join(src, 'd'), { recursive: true });
    fs.writeFileSync(path.join(src, 'f'), 'hi\n');
    fs.writeFileSync(path.join(src, 'd/inner'), 'inside\n');
    fs.symlinkSync('f', path.join(src, 's'));
    execFileSync('mkfifo', [path.join(src, 'p')]);
    setXattr(path.join(src, 'f'), 'user.x', 'y');
    setXattr(path.join(src, 'd'), 'user.d', 'v');
    setTime(path.join(src, 'f'), T2001);
    setTime(path.join(src, 'd'), T2002);
    setTime(path.join(src, 's'), T2003);
    setTime(path.join(src, 'p'), T2004);
    setTime(src, T2001);
    j = await openTestJournal(src, state);
  });
  afterEach(async () => {
    await j.close().catch(() => undefined);
    rmTemp(dir);
  });

  const lastSeq = () => {
    j.svc.writer.flush();
    return buildHistory(readJournal(state).records).lastSeq;
  };

  it('rm -rf, then a rollback: xattrs, and the mtimes of the directory, symlink, FIFO and the directory they were in', async () => {
    const { vfs } = j;
    await vfs.unlink('/f');
    await vfs.unlink('/d/inner');
    await vfs.rmdir('/d');
    await vfs.unlink('/s');
    await vfs.unlink('/p');
    expect(fs.readdirSync(src)).toEqual([]);

    const r = await j.svc.rollback({ session: 'test-session' });
    expect(r.conflicts).toEqual([]);
    expect(r.complete).toBe(true);
    expect(fs.readdirSync(src).sort()).toEqual(['d', 'f', 'p', 's']);
    expect(xattrsOf(path.join(src, 'f'))).toEqual({ 'user.x': 'y' });
    expect(xattrsOf(path.join(src, 'd'))).toEqual({ 'user.d': 'v' });
    expect(mtimeOf(path.join(src, 'f'))).toBe(T2001);
    expect(mtimeOf(path.join(src, 'd'))).toBe(T2002);
    expect(mtimeOf(path.join(src, 's'))).toBe(T2003);
    expect(mtimeOf(path.join(src, 'p'))).toBe(T2004);
    expect(mtimeOf(src)).toBe(T2001);
    expect(fs.readFileSync(path.join(src, 'd/inner'), 'utf8')).toBe('inside\n');
  });

  it('a file renamed over keeps its xattrs in the journal, and gets them back', async () => {
    await vfsFs.write(j.vfs, '/g', 'new\n');
    await j.vfs.rename('/g', '/f');
    expect(xattrsOf(path.join(src, 'f'))).toEqual({});
    const r = await j.svc.rollback({ session: 'test-session' });
    expect(r.conflicts).toEqual([]);
    expect(fs.readFileSync(path.join(src, 'f'), 'utf8')).toBe('hi\n');
    expect(xattrsOf(path.join(src, 'f'))).toEqual({ 'user.x': 'y' });
    expect(mtimeOf(src)).toBe(T2001);
  });

  it('records are written in sequence order while a directory\'s mtime is looked up (dbench: verify found #4056 after #4057)', async () => {
    const { vfs } = j;
    // each mkdir is its directory's first change in the session: its record waits for a stat
    // of the parent; each utimens records nothing of the kind and is numbered at once
    const parents = Array.from({ length: 40 }, (_, i) => `/p${i}`);
    for (const p of parents) fs.mkdirSync(path.join(src, p));
    await Promise.all(parents.flatMap((p) => [vfs.mkdir(`${p}/new`, 0o755), vfs.utimens('/f', { mtimeNs: T2002 })]));
    j.svc.writer.flush();
    const seqs = buildHistory(readJournal(state).records).ops.map((op) => op.seq);
    expect(seqs.length).toBe(80);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    const report = await verifyJournal(state);
    expect(report.problems).toEqual([]);
  });

  it('a journal an earlier build wrote out of order numbers on from its highest record, not its last', () => {
    const op = (seq: number) => ({ segment: 1, offset: seq * 100, record: { kind: 'op' as const, seq, time: seq, session: 's', actor: 'a', op: 'mkdir' as const, paths: [`/d${seq}`], before: [null] } });
    expect(buildHistory([op(1), op(3), op(2)]).lastSeq).toBe(3);
  });

  it('a directory touched, then written into: the rollback ends at the mtime before the touch, not the one the write recorded', async () => {
    const { vfs } = j;
    await vfs.utimens('/d', { mtimeNs: T2004 });
    await vfsFs.write(vfs, '/d/new', 'x');
    await vfs.utimens('/d', { mtimeNs: T2003 });
    await vfs.unlink('/d/new');
    await vfs.unlink('/d/inner');
    await vfs.rmdir('/d');
    const r = await j.svc.rollback({ session: 'test-session' });
    expect(r.conflicts).toEqual([]);
    expect(mtimeOf(path.join(src, 'd'))).toBe(T2002);
    expect(mtimeOf(src)).toBe(T2001);
    expect(fs.readdirSync(path.join(src, 'd'))).toEqual(['inner']);
  });

  it('a directory moved, or replaced by a new one, gets its own mtime back, not the one noted at its other name', async () => {
    const { vfs } = j;
    await vfs.rename('/d', '/e');
    await vfsFs.write(vfs, '/e/new', 'x');
    await vfs.mkdir('/d', 0o755);
    await vfsFs.write(vfs, '/d/other', 'y');
    const r = await j.svc.rollback({ session: 'test-session' });
    expect(r.conflicts).toEqual([]);
    expect(fs.readdirSync(path.join(src, 'd'))).toEqual(['inner']);
    expect(mtimeOf(path.join(src, 'd'))).toBe(T2002);
    expect(mtimeOf(src)).toBe(T2001);
  });

  it('a rollback cut short after its first undo, run again: the directory mtimes the first run noted are set back too', async () => {
    const { vfs } = j;
    await vfs.unlink('/d/inner');
    await vfsFs.write(vfs, '/g', 'new');
    let n = 0;
    await expect(
      j.svc.rollback({ session: 'test-session' }, () => {
        if (++n === 1) throw new Error('killed');
      }),
    ).rejects.toThrow('killed');
    expect(fs.existsSync(path.join(src, 'g'))).toBe(false);
    const r = await j.svc.rollback({ session: 'test-session' });
    expect(r.conflicts).toEqual([]);
    expect(r.complete).toBe(true);
    expect(fs.readdirSync(path.join(src, 'd'))).toEqual(['inner']);
    expect(mtimeOf(path.join(src, 'd'))).toBe(T2002);
    expect(mtimeOf(src)).toBe(T2001);
  });

  it.skipIf(!isRoot)('a chown that cleared setuid rolls back with no conflict, to any point, setuid included', async () => {
    const { vfs } = j;
    await vfsFs.write(vfs, '/t', 'x');
    await vfs.chmod('/t', 0o4755);
    const afterChmod = lastSeq();
    await vfs.chown('/t', 1, 1);
    expect(fs.statSync(path.join(src, 't')).mode & 0o7777).toBe(0o755); // the kernel cleared it

    const r1 = await j.svc.rollback({ toSeq: afterChmod });
    expect(r1.conflicts).toEqual([]);
    const st = fs.statSync(path.join(src, 't'));
    expect([st.mode & 0o7777, st.uid, st.gid]).toEqual([0o4755, 0, 0]);

    const r2 = await j.svc.rollback({ session: 'test-session' });
    expect(r2.conflicts).toEqual([]);
    expect(r2.complete).toBe(true);
    expect(fs.existsSync(path.join(src, 't'))).toBe(false);
  });

  it.skipIf(!isRoot)('a removed setuid file of another owner comes back setuid (owner set before mode)', async () => {
    const p = path.join(src, 'su');
    fs.writeFileSync(p, '#!/bin/sh\n');
    fs.chownSync(p, 1, 1);
    fs.chmodSync(p, 0o4755);
    await j.vfs.unlink('/su');
    const r = await j.svc.rollback({ session: 'test-session' });
    expect(r.conflicts).toEqual([]);
    const st = fs.statSync(p);
    expect([st.mode & 0o7777, st.uid, st.gid]).toEqual([0o4755, 1, 1]);
  });
});
