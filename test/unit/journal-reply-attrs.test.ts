import fs from 'node:fs';
import { constants as C } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Attr } from '../../src/core/index.js';
import { LocalBackend } from '../../src/backend/index.js';
import { Vfs } from '../../src/vfs/index.js';
import { openTestJournal, type TestJournal } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * A change the journal records ends with a stat of the node (its outcome). The vfs hands those
 * attributes back, so a binding answers the request without a second stat of the same node
 * (a SETATTR, MKDIR, SYMLINK or CREATE reply); without a journal nothing is read, and the
 * binding asks getattr as before.
 */
describe('attributes of a journaled change, for its reply', () => {
  let dir: string;
  let src: string;
  let j: TestJournal;
  let stats: number;
  beforeEach(async () => {
    dir = makeTemp('reply-attrs');
    src = path.join(dir, 'src');
    fs.mkdirSync(src);
    fs.writeFileSync(path.join(src, 'f'), 'twelve bytes');
    j = await openTestJournal(src, path.join(dir, 'state'));
    stats = 0;
    const b = j.backend as LocalBackend;
    const stat = b.stat.bind(b);
    const tryStat = b.tryStat.bind(b);
    b.stat = (p: string) => (stats++, stat(p));
    b.tryStat = (p: string) => (stats++, tryStat(p));
  });
  afterEach(async () => {
    await j.close().catch(() => undefined);
    rmTemp(dir);
  });

  /** what a getattr answers now, for comparison (not counted) */
  const fresh = (p: string) => {
    const st = fs.lstatSync(path.join(src, p), { bigint: true });
    return { mode: Number(st.mode), size: Number(st.size), ino: Number(st.ino), mtimeNs: st.mtimeNs, nlink: Number(st.nlink) };
  };
  const pick = (a: Attr | undefined) => a && { mode: a.mode, size: a.size, ino: a.ino, mtimeNs: a.mtimeNs, nlink: a.nlink };

  it('chmod, chown and utimens resolve to the node as they left it, from the stats the journal makes', async () => {
    const { vfs } = j;
    const mode = await vfs.chmod('/f', 0o600);
    expect(pick(mode)).toEqual(fresh('f'));
    expect(mode?.mode).toBe(C.S_IFREG | 0o600);
    // the before-state only: the local store answers the change with the attributes it left
    // (an fstat of the descriptor that made it), for the journal's after-state and the reply
    expect(stats).toBe(1);
    const me = fs.statSync(path.join(src, 'f'));
    expect(pick(await vfs.chown('/f', me.uid, me.gid))).toEqual(fresh('f'));
    expect(stats).toBe(2);
    const times = await vfs.utimens('/f', { mtimeNs: 1_000_000_000_123_456_789n });
    expect(times?.mtimeNs).toBe(1_000_000_000_123_456_789n);
    expect(pick(times)).toEqual(fresh('f'));
    expect(stats).toBe(3);
    // and the journal's after-states are those attributes
    const last = j.svc.history().ops.filter((o) => o.paths[0] === '/f').at(-1);
    expect(last?.op).toBe('utimens');
    expect(last?.after?.[0]).toMatchObject({ mtimeNs: '1000000000123456789', mode: 0o600 });
  });

  it('mkdir, symlink and create give the new node', async () => {
    const { vfs } = j;
    const d = await vfs.mkdir('/d', 0o750);
    expect(d?.type).toBe('dir');
    expect(pick(d)).toEqual(fresh('d'));
    const l = await vfs.symlink('f', '/l');
    expect(l?.type).toBe('symlink');
    expect(pick(l)).toEqual(fresh('l'));
    const made: { attr?: Attr } = {};
    const fh = await vfs.create('/d/new', 0o640, C.O_WRONLY | C.O_CREAT | C.O_EXCL, undefined, made);
    try {
      expect(made.attr?.type).toBe('file');
      expect(pick(made.attr)).toEqual(pick(await vfs.fgetattr(fh)));
    } finally {
      await vfs.release(fh);
    }
  });

  it('without a journal nothing is read: the caller asks getattr', async () => {
    const vfs = new Vfs(new LocalBackend(src));
    expect(await vfs.chmod('/f', 0o644)).toBeUndefined();
    expect(await vfs.mkdir('/plain', 0o755)).toBeUndefined();
    const made: { attr?: Attr } = {};
    const fh = await vfs.create('/plain/x', 0o644, C.O_WRONLY | C.O_CREAT, undefined, made);
    await vfs.release(fh);
    expect(made.attr).toBeUndefined();
  });
});
