import { createHook } from 'node:async_hooks';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { openGcsStack, type GcsStack } from '../../src/backend/gcs-stack.js';
import { startEmulatorFixture, type EmulatorFixture } from '../helpers/gcs-emulator.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * What one small file costs the daemon besides its request (issue 19: tar -x of 3,000 files
 * with --durability journal is CPU-bound on a 2-core host): each thread-pool trip is a wake-up
 * of a pool thread and one of the event loop, and on a busy host the context switches cost more
 * than the file operation itself. Counted through async_hooks, as the daemon makes them.
 */

let fx: EmulatorFixture;
let tmp: string;
beforeAll(async () => {
  fx = await startEmulatorFixture();
  await fx.storage.createBucket('upload-cost');
  tmp = makeTemp('gcs-upload-cost');
});
afterAll(async () => {
  await fx?.stop();
  rmTemp(tmp);
});

/** Thread-pool fs requests (callback and promise API, and the native addon's jobs) made while `fn` runs. */
async function fsRequests(fn: () => Promise<void>): Promise<Record<string, number>> {
  const seen: Record<string, number> = {};
  const hook = createHook({
    init(_id, type) {
      if (type === 'FSREQCALLBACK' || type === 'FSREQPROMISE' || type.startsWith('ledgerfs:')) seen[type] = (seen[type] ?? 0) + 1;
    },
  });
  hook.enable();
  try {
    await fn();
  } finally {
    hook.disable();
  }
  return seen;
}

async function stack(name: string, durability: 'bucket' | 'journal'): Promise<GcsStack> {
  const dir = path.join(tmp, name);
  return openGcsStack(
    { type: 'gcs', bucket: 'upload-cost', prefix: `${name}/`, apiEndpoint: fx.emu.url, durability, cache: { contentDir: path.join(dir, 'cache') } },
    { stagingDir: path.join(dir, 'staging'), spoolDir: path.join(dir, 'spool') },
  );
}

const N = 20;
const total = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);

// journal: the spool's fdatasync (shared by the closes of one turn) and the content cache's
// copy; bucket: none (the staging file is reused, emptied on the loop; no copy is kept). Plus
// the first staging file's create.
describe.each([['journal', 2.2], ['bucket', 0.2]] as const)('durability %s: a small file created, written, closed and uploaded', (durability, most) => {
  it(`costs at most ${most} thread-pool fs requests (${N} files, the upload and the content cache's copy included)`, async () => {
    const s = await stack(`cost-${durability}`, durability);
    try {
      await s.store.mkdir('/d', 0o755);
      // files made and removed in the staging directory (each a metadata write, and on ext4
      // without a journal a create scans past every inode freed in the last seconds)
      const staging = path.join(tmp, `cost-${durability}`, 'staging');
      const inStaging = (calls: unknown[][]) => calls.filter((c) => String(c[0]).startsWith(staging + path.sep)).length;
      const opens = vi.spyOn(fs, 'open');
      const unlinks = vi.spyOn(fs, 'unlink');
      const seen = await fsRequests(async () => {
        for (let i = 0; i < N; i++) {
          const f = await s.store.open(`/d/f${i}`, { write: true, create: true, exclusive: true }, 0o644);
          const data = Buffer.from(`file ${i} `.repeat(50));
          await f.write(data, data.length, 0);
          await f.close();
        }
        await s.gcs.uploads?.drain();
        await new Promise((r) => setTimeout(r, 200)); // the content cache's copies, written after the uploads
      });
      expect(total(seen) / N).toBeLessThanOrEqual(most);
      // a few staging files serve them all: each emptied at close and taken by a later handle
      // (one more is made when the last one's emptying has not finished yet)
      expect(inStaging(opens.mock.calls)).toBeLessThanOrEqual(N / 4);
      expect(inStaging(unlinks.mock.calls)).toBe(0);
      opens.mockRestore();
      unlinks.mockRestore();
      if (durability === 'bucket') return;
      // the copies are there: a read of a file just written downloads nothing (the open's
      // revalidation of the generation is the one request)
      const before = (await fx.stats()).requests;
      const f = await s.store.open('/d/f7', { read: true });
      const buf = Buffer.alloc(600);
      const n = await f.read(buf, 600, 0);
      await f.close();
      expect(buf.subarray(0, n).toString()).toBe('file 7 '.repeat(50));
      expect((await fx.stats()).requests - before).toBe(1);
    } finally {
      await s.store.close();
      s.content?.close();
    }
  });
});
