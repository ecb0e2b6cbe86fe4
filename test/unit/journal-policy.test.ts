import fs from 'node:fs';
import { constants as C } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { JournalService } from '../../src/journal/service.js';
import { silentLogger } from '../../src/core/log.js';
import type { Vfs } from '../../src/vfs/vfs.js';
import { policyFixture, type PolicyFixture } from '../helpers/policy.js';

/** The journal after the policy stage: rollback as operator, with quota usage kept exact. */
describe('journal with a policy', () => {
  let fx: PolicyFixture;
  let svc: JournalService;
  afterEach(async () => {
    await svc?.close();
    await fx?.close();
  });

  const write = async (vfs: Vfs, p: string, data: string) => {
    const fh = await vfs.create(p, 0o644, C.O_WRONLY | C.O_CREAT | C.O_TRUNC);
    try {
      await vfs.write(fh, Buffer.from(data), data.length, 0);
      await vfs.flush(fh);
    } finally {
      await vfs.release(fh);
    }
  };

  it('keeps usage exact across a rollback and its undo; nothing refused is journaled', async () => {
    fx = await policyFixture(
      'roots:\n  - path: /work\n    mode: rw\n    quota: { bytes: 64KiB, files: 20 }\n    suffixes: [.txt]\n  - path: /ref\n    mode: ro\n',
      (src) => {
        fs.mkdirSync(path.join(src, 'work'));
        fs.mkdirSync(path.join(src, 'ref'));
        fs.writeFileSync(path.join(src, 'work/a.txt'), 'a'.repeat(1000));
      },
    );
    svc = await JournalService.open({
      stateDir: path.join(fx.dir, 'state'), backend: fx.ws.backend, source: fx.src, session: 's', actor: 'a', role: 'test', log: silentLogger,
    });
    const vfs = svc.attachDirect(fx.ws.stages); // policy first, journal second
    const start = fx.usage(0);
    await write(vfs, '/work/b.txt', 'b'.repeat(5000));
    await write(vfs, '/work/a.txt', 'short');
    await vfs.mkdir('/work/sub', 0o755);
    await vfs.rename('/work/b.txt', '/work/sub/b.txt');
    await expect(write(vfs, '/work/c.bin', 'x')).rejects.toMatchObject({ code: 'EACCES' }); // suffix
    await expect(write(vfs, '/ref/r.txt', 'x')).rejects.toMatchObject({ code: 'EROFS' });
    svc.writer.flush();
    expect(svc.history().ops.map((o) => o.op)).toEqual(['create', 'create', 'mkdir', 'rename']);
    const later = fx.usage(0);
    expect(later).toEqual(await fx.recount(0));

    const r = await svc.rollback({ toSeq: 0 });
    expect(r.conflicts).toEqual([]);
    expect(fx.usage(0)).toEqual(start);
    expect(fx.usage(0)).toEqual(await fx.recount(0));
    expect(fs.readFileSync(path.join(fx.src, 'work/a.txt'), 'utf8')).toBe('a'.repeat(1000));

    await svc.rollback({ session: r.session as string });
    expect(fx.usage(0)).toEqual(later);
    expect(fx.usage(0)).toEqual(await fx.recount(0));
  });
  it('takes large before-images through the store\'s copy (reflink), not by streaming through the view', async () => {
    const big = Buffer.alloc(3 << 20, 7);
    fx = await policyFixture('roots:\n  - path: /work\n    mode: rw\n', (src) => {
      fs.mkdirSync(path.join(src, 'work'));
      fs.writeFileSync(path.join(src, 'work/big.bin'), big);
    });
    const store = fx.ws.store;
    const copyOut = store.copyOut?.bind(store);
    expect(copyOut).toBeDefined();
    const copied: string[] = [];
    store.copyOut = (p, host) => {
      copied.push(p);
      return (copyOut as NonNullable<typeof copyOut>)(p, host);
    };
    svc = await JournalService.open({
      stateDir: path.join(fx.dir, 'state'), backend: fx.ws.backend, source: fx.src, session: 's', actor: 'a', role: 'test', log: silentLogger,
    });
    const vfs = svc.attachDirect(fx.ws.stages);
    await write(vfs, '/work/big.bin', 'small now');
    expect(copied).toEqual(['/work/big.bin']);
    await svc.rollback({ toSeq: 0 });
    expect(fs.readFileSync(path.join(fx.src, 'work/big.bin')).equals(big)).toBe(true);
  });
});
