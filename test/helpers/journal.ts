import fs, { constants as C } from 'node:fs';
import path from 'node:path';
import { LocalBackend } from '../../src/backend/local.js';
import { JournalService } from '../../src/journal/service.js';
import { silentLogger } from '../../src/core/log.js';
import type { Vfs } from '../../src/vfs/vfs.js';

export interface TestJournal {
  svc: JournalService;
  vfs: Vfs;
  backend: LocalBackend;
  close(): Promise<void>;
}

/** A journaled Vfs over a local directory, no mount: the core as the daemon runs it. */
export async function openTestJournal(src: string, state: string, session = 'test-session'): Promise<TestJournal> {
  const backend = new LocalBackend(src);
  const svc = await JournalService.open({ stateDir: state, backend, source: src, session, actor: 'test', role: 'test', log: silentLogger });
  const vfs = svc.attachDirect();
  return { svc, vfs, backend, close: () => svc.close() };
}

/** Programs' file operations, through a Vfs (open/write/close as the kernel would send them). */
export const vfsFs = {
  async write(vfs: Vfs, path: string, data: string | Buffer, flags = C.O_WRONLY | C.O_CREAT | C.O_TRUNC, offset = 0): Promise<void> {
    const buf = typeof data === 'string' ? Buffer.from(data) : data;
    let fh: number;
    try {
      fh = await vfs.open(path, flags & ~(C.O_CREAT | C.O_EXCL));
    } catch (err) {
      if ((err as { code?: string }).code !== 'ENOENT' || !(flags & C.O_CREAT)) throw err;
      fh = await vfs.create(path, 0o644, flags);
    }
    try {
      if (buf.length > 0) await vfs.write(fh, buf, buf.length, offset);
      await vfs.flush(fh);
    } finally {
      await vfs.release(fh);
    }
  },
  async append(vfs: Vfs, path: string, data: string): Promise<void> {
    const size = (await vfs.getattr(path)).size;
    await vfsFs.write(vfs, path, data, C.O_WRONLY, size);
  },
  async read(vfs: Vfs, path: string): Promise<string> {
    const size = (await vfs.getattr(path)).size;
    const fh = await vfs.open(path, C.O_RDONLY);
    try {
      const buf = Buffer.alloc(size);
      const n = size ? await vfs.read(fh, buf, size, 0) : 0;
      return buf.subarray(0, n).toString();
    } finally {
      await vfs.release(fh);
    }
  },
};

/**
 * Make a journal closed cleanly look as a kill -9 of its writer leaves it: the last segment
 * without its close record, named as the one being written, and the lock left behind.
 */
export function asIfKilled(state: string, pid = 999_999): string {
  const journal = path.join(state, 'journal');
  const segs = fs.readdirSync(journal).filter((n) => /^\d+\.log$/.test(n)).sort();
  const seg = path.join(journal, segs[segs.length - 1] as string);
  const text = fs.readFileSync(seg, 'utf8');
  const lastLine = text.slice(0, -1).lastIndexOf('\n') + 1;
  if (!text.slice(lastLine).includes('"kind":"close"')) throw new Error(`${seg} does not end with a close record`);
  fs.truncateSync(seg, Buffer.byteLength(text.slice(0, lastLine)));
  fs.writeFileSync(path.join(journal, 'writing.json'), JSON.stringify({ segment: Number(path.basename(seg, '.log')), pid }) + '\n');
  fs.writeFileSync(path.join(state, 'lock'), JSON.stringify({ pid, role: 'killed', since: new Date().toISOString() }) + '\n');
  return seg;
}
