import { execFileSync } from 'node:child_process';
import fs, { constants as C } from 'node:fs';
import path from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LocalBackend } from '../../src/backend/local.js';
import type { VfsError } from '../../src/core/errors.js';
import { buildHistory } from '../../src/journal/history.js';
import { readIntactJournal } from '../../src/journal/reader.js';
import { JournalService } from '../../src/journal/service.js';
import { stateSpace, StateSpaceWatch } from '../../src/journal/state-space.js';
import type { Vfs } from '../../src/vfs/vfs.js';
import { vfsFs } from '../helpers/journal.js';
import { isRoot, makeTemp, rmTemp } from '../helpers/tmp.js';

/** A 2 MiB tmpfs as the state directory (needs root; CI runs as root). */
describe('a full state disk refuses changes with ENOSPC and a denial line; a low one is a warning', () => {
  let dir: string;
  let src: string;
  let state: string;
  let svc: JournalService | null = null;
  let vfs: Vfs;
  let mounted = false;
  const denials: { op: string; path: string; code: string }[] = [];
  const lines: { level: number; msg: string }[] = [];
  const log = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as { level: number; msg: string }) });

  beforeEach(async (ctx) => {
    if (!isRoot()) ctx.skip();
    dir = makeTemp('state-full');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
    fs.mkdirSync(state);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', state]);
    mounted = true;
    denials.length = 0;
    lines.length = 0;
    svc = await JournalService.open({
      stateDir: state, backend: new LocalBackend(src), source: src, session: 'full', actor: 'test', role: 'test', log,
      denials: { record: (op, p, err: VfsError) => denials.push({ op, path: p, code: err.code }) },
    });
    vfs = svc.attachDirect();
  });
  afterEach(async () => {
    await svc?.close().catch(() => undefined);
    svc = null;
    if (mounted) execFileSync('umount', ['-l', state]);
    mounted = false;
    rmTemp(dir);
  });

  /** Fill the state file system up to its last byte. */
  const fill = () => {
    const fd = fs.openSync(path.join(state, 'filler'), 'w');
    try {
      for (const size of [65536, 4096, 512, 64, 1]) {
        try {
          for (;;) fs.writeSync(fd, Buffer.alloc(size));
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
        }
      }
    } finally {
      fs.closeSync(fd);
    }
  };
  /** Fill it but for `room` bytes: records still fit, a large before-image does not. */
  const fillBut = (room: number) => {
    fill();
    const filler = path.join(state, 'filler');
    fs.truncateSync(filler, Math.max(0, fs.statSync(filler).size - room));
  };
  const code = async (p: Promise<unknown>) => p.then(() => 'ok', (err: { code?: string }) => err.code);

  it('refuses create, mkdir and an overwrite with ENOSPC, changes nothing, and works again once there is room', async () => {
    await vfsFs.write(vfs, '/kept.txt', 'before\n');
    svc?.writer.flush();
    fill();
    // the segment's last page may still hold a few records: create until the journal is full
    let refused = '';
    let n = 0;
    for (; n < 500 && !refused; n++) {
      const c = await code(vfsFs.write(vfs, `/n${n}`, 'x'));
      if (c !== 'ok') refused = c;
    }
    expect(refused).toBe('ENOSPC');
    expect(fs.existsSync(path.join(src, `n${n - 1}`))).toBe(false);
    expect(denials).toContainEqual({ op: 'create', path: `/n${n - 1}`, code: 'ENOSPC' });
    expect(await code(vfsFs.write(vfs, '/new.txt', 'x'))).toBe('ENOSPC');
    expect(await code(vfs.mkdir('/d', 0o755))).toBe('ENOSPC');
    // an overwrite needs a before-image first: refused too, the old bytes stay
    expect(await code(vfsFs.write(vfs, '/kept.txt', 'after\n', C.O_WRONLY | C.O_TRUNC))).toBe('ENOSPC');
    expect(fs.existsSync(path.join(src, 'new.txt'))).toBe(false);
    expect(fs.existsSync(path.join(src, 'd'))).toBe(false);
    expect(fs.readFileSync(path.join(src, 'kept.txt'), 'utf8')).toBe('before\n');
    expect(denials).toEqual(expect.arrayContaining([{ op: 'create', path: '/new.txt', code: 'ENOSPC' }, { op: 'mkdir', path: '/d', code: 'ENOSPC' }]));

    // low space: a warning in the log and a line for /.ledgerfs/usage
    expect(stateSpace(state).low).toBe(true);
    const watch = new StateSpaceWatch(state, log);
    watch.check();
    expect(lines.some((l) => l.level === 40 && /low on space/.test(l.msg))).toBe(true);
    expect(watch.note()).toMatch(/^warning: the journal's state directory is low on space: .* state_free_bytes=\d+$/);

    fs.rmSync(path.join(state, 'filler'));
    await vfsFs.write(vfs, '/new.txt', 'x');
    expect(fs.readFileSync(path.join(src, 'new.txt'), 'utf8')).toBe('x');
    svc?.writer.flush();
    // the journal stayed whole: no half line where the full disk cut a write
    const ops = readIntactJournal(state).records.filter((r) => r.record.kind === 'op').map((r) => (r.record as { paths: string[] }).paths[0]);
    expect(ops).toContain('/new.txt');
    // every create that was made is journaled, the refused one is not
    for (let i = 0; i < n - 1; i++) expect(ops).toContain(`/n${i}`);
    expect(ops).not.toContain(`/n${n - 1}`);
    // outcomes that waited for room were written then: every change made is known done
    const h = buildHistory(readIntactJournal(state).records);
    const made = h.ops.filter((op) => /^\/n\d+$/.test(op.paths[0] as string));
    expect(made.length).toBeGreaterThan(0);
    expect(made.filter((op) => op.status !== 'done' && op.status !== 'open').map((op) => `${op.op} ${op.paths[0]} ${op.status}`)).toEqual([]);
    expect(ops.filter((p) => p === '/d')).toEqual([]);
  });

  it('a before-image that does not fit refuses the unlink or overwrite with ENOSPC (not EIO), and the file stays', async () => {
    const big = Buffer.alloc(1 << 20);
    for (let i = 0; i < big.length; i += 4096) big.writeUInt32LE(i * 2654435761 >>> 0, i);
    fs.writeFileSync(path.join(src, 'big'), big);
    fs.writeFileSync(path.join(src, 'big2'), big.subarray(0, 200_000));
    svc?.writer.flush();
    fillBut(256 * 1024);
    expect(await code(vfs.unlink('/big'))).toBe('ENOSPC');
    expect(await code(vfsFs.write(vfs, '/big2', 'after\n', C.O_WRONLY | C.O_TRUNC))).toBe('ENOSPC');
    expect(fs.readFileSync(path.join(src, 'big')).equals(big)).toBe(true);
    expect(fs.readFileSync(path.join(src, 'big2')).equals(big.subarray(0, 200_000))).toBe(true);
  });
});
