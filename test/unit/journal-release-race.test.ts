import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { openTestJournal, type TestJournal } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

// Where the kernel sends no FLUSH (FOPEN_NOFLUSH), a write session ends at release, and the
// program does not wait for it: its next request can reach the core while the session's end is
// still being read. That end must describe the file as the session left it, not as the next
// request made it, or a rollback later stops on a conflict that is not one (or takes one for
// a clean state).

const C = fs.constants;
const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex');

describe('journal: a session ended by release while the next request is already here', () => {
  let dir: string;
  let src: string;
  let j: TestJournal;
  beforeEach(async () => {
    dir = makeTemp('journal-release-race');
    src = path.join(dir, 'src');
    fs.mkdirSync(src);
    fs.writeFileSync(path.join(src, 'a.bin'), Buffer.alloc(9000, 7));
    j = await openTestJournal(src, path.join(dir, 'state'));
  });
  afterEach(async () => {
    await j.close().catch(() => undefined);
    rmTemp(dir);
  });

  const ends = (p: string) => j.svc.history().ops.filter((o) => o.paths[0] === p && o.after?.[0]?.type === 'file');

  /**
   * Reads and stats through `file` (the ending session's) take `ms`, as a remote store's do
   * (the local one answers them synchronously, which hides the race): the session's end is
   * still being read when the next request arrives.
   */
  function slow(file: { read: (...a: never[]) => Promise<number>; stat: () => Promise<unknown> }, ms: number): () => void {
    const delay = () => new Promise((r) => setTimeout(r, ms));
    const { read, stat } = file;
    const r = vi.spyOn(file, 'read').mockImplementation(async (...a: never[]) => (await delay(), read.apply(file, a)));
    const st = vi.spyOn(file, 'stat').mockImplementation(async () => (await delay(), stat.apply(file)));
    return () => {
      r.mockRestore();
      st.mockRestore();
    };
  }
  /** the store's file behind a handle (the core's own, private) */
  const fileOf = (fh: number) => (j.vfs as unknown as { handles: Map<number, { of: { file: Parameters<typeof slow>[0] } }> }).handles.get(fh)?.of.file;

  for (const next of ['append', 'chmod', 'rename'] as const) {
    it(`the end records the session's own after-state, with ${next === 'append' ? 'an append' : `a ${next}`} right behind the release`, async () => {
      const fh = await j.vfs.open('/a.bin', C.O_WRONLY);
      const b = Buffer.alloc(4096, 1);
      await j.vfs.write(fh, b, b.length, 4096); // (not from the start: the end reads the file back)
      const atClose = fs.readFileSync(path.join(src, 'a.bin'));
      const file = fileOf(fh);
      if (!file) throw new Error('no open file behind the handle');
      const restore = slow(file, 40);
      try {
        const released = j.vfs.release(fh); // not awaited: close(2) has returned
        if (next === 'append') {
          const fh2 = await j.vfs.open('/a.bin', C.O_WRONLY | C.O_APPEND);
          const c = Buffer.from('tail');
          await j.vfs.write(fh2, c, c.length, 9000);
          await j.vfs.release(fh2);
        } else if (next === 'rename') {
          await j.vfs.rename('/a.bin', '/b.bin');
        } else {
          await j.vfs.chmod('/a.bin', 0o600);
        }
        await released;
      } finally {
        restore();
      }
      const first = ends('/a.bin')[0];
      expect(first?.after?.[0]).toMatchObject({ type: 'file', size: 9000, mode: 0o644, sha256: sha(atClose) });
    });
  }
});
