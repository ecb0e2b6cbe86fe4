import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { openTestJournal, type TestJournal } from '../helpers/journal.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

// A write session's end records the sha256 of the file (rollback judges conflicts on content).
// A file written in order from its start is hashed as its bytes pass; anything else is read back
// at the end. Either way the hash is the content's.

const C = fs.constants;
const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex');

describe('journal: the content hash of a write session', () => {
  let dir: string;
  let src: string;
  let j: TestJournal;
  beforeEach(async () => {
    dir = makeTemp('journal-hash');
    src = path.join(dir, 'src');
    fs.mkdirSync(src);
    j = await openTestJournal(src, path.join(dir, 'state'));
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    await j.close().catch(() => undefined);
    rmTemp(dir);
  });

  /** the last session end's content hash for `p` */
  const recorded = (p: string) => {
    const ops = j.svc.history().ops.filter((o) => o.paths[0] === p && o.after?.[0]?.type === 'file');
    return ops[ops.length - 1]?.after?.[0];
  };
  const chunk = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff));

  /** run `steps` on a file open for writing, close it, and say how many reads its close made */
  async function session(p: string, flags: number, steps: (fh: number) => Promise<void>): Promise<number> {
    const fh = flags & C.O_CREAT ? await j.vfs.create(p, 0o644, flags) : await j.vfs.open(p, flags);
    await steps(fh);
    const reads = vi.spyOn(fs, 'readSync');
    await j.vfs.flush(fh);
    await j.vfs.release(fh);
    const n = reads.mock.calls.length;
    reads.mockRestore();
    return n;
  }

  it('hashes a file written in order as it goes: its close reads nothing', async () => {
    const parts = [chunk(4096, 1), chunk(4096, 2), chunk(1000, 3)];
    const reads = await session('/seq.bin', C.O_WRONLY | C.O_CREAT | C.O_TRUNC, async (fh) => {
      let off = 0;
      for (const b of parts) off += await j.vfs.write(fh, b, b.length, off);
    });
    const content = fs.readFileSync(path.join(src, 'seq.bin'));
    expect(content.length).toBe(9192);
    expect(recorded('/seq.bin')?.sha256).toBe(sha(content));
    expect(reads).toBe(0);
  });

  it('reads the file back when the writes were not in order, cut, or left old bytes', async () => {
    const a = chunk(4096, 4);
    const b = chunk(4096, 5);
    // out of order
    expect(await session('/ooo.bin', C.O_WRONLY | C.O_CREAT | C.O_TRUNC, async (fh) => {
      await j.vfs.write(fh, b, b.length, 4096);
      await j.vfs.write(fh, a, a.length, 0);
    })).toBeGreaterThan(0);
    expect(recorded('/ooo.bin')?.sha256).toBe(sha(fs.readFileSync(path.join(src, 'ooo.bin'))));
    // written in order, then cut
    expect(await session('/cut.bin', C.O_WRONLY | C.O_CREAT | C.O_TRUNC, async (fh) => {
      await j.vfs.write(fh, a, a.length, 0);
      await j.vfs.write(fh, b, b.length, 4096);
      await j.vfs.ftruncate(fh, 5000);
    })).toBeGreaterThan(0);
    expect(recorded('/cut.bin')?.sha256).toBe(sha(fs.readFileSync(path.join(src, 'cut.bin'))));
    // the start of an existing file overwritten: its old tail stays, so the hash must read it
    fs.writeFileSync(path.join(src, 'old.bin'), chunk(10_000, 6));
    expect(await session('/old.bin', C.O_WRONLY, async (fh) => {
      await j.vfs.write(fh, a, a.length, 0);
    })).toBeGreaterThan(0);
    const old = fs.readFileSync(path.join(src, 'old.bin'));
    expect(old.length).toBe(10_000);
    expect(recorded('/old.bin')?.sha256).toBe(sha(old));
    // an existing file rewritten whole from its start (same size): no read needed
    expect(await session('/old.bin', C.O_WRONLY, async (fh) => {
      const all = chunk(10_000, 7);
      await j.vfs.write(fh, all, all.length, 0);
    })).toBe(0);
    expect(recorded('/old.bin')?.sha256).toBe(sha(chunk(10_000, 7)));
  });

  it('an fsync in the middle records the hash so far, and the session goes on hashing', async () => {
    const a = chunk(3000, 8);
    const b = chunk(3000, 9);
    let atSync: string | undefined;
    const reads = await session('/sync.bin', C.O_WRONLY | C.O_CREAT | C.O_TRUNC, async (fh) => {
      await j.vfs.write(fh, a, a.length, 0);
      await j.vfs.fsync(fh, false);
      atSync = recorded('/sync.bin')?.sha256;
      await j.vfs.write(fh, b, b.length, 3000);
    });
    expect(atSync).toBe(sha(a));
    expect(recorded('/sync.bin')?.sha256).toBe(sha(Buffer.concat([a, b])));
    expect(reads).toBe(0);
  });
});
