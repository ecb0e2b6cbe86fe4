import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ReservedNameLayer } from '../../src/backend/layers/reserved.js';
import { DEFAULTS } from '../../src/config/defaults.js';
import { BlobStore } from '../../src/journal/blobs.js';
import { BucketMirror } from '../../src/journal/bucket-mirror.js';
import { readJournal } from '../../src/journal/reader.js';
import type { JournalRemote } from '../../src/journal/remote.js';
import { stateLayout } from '../../src/journal/layout.js';
import { JournalService } from '../../src/journal/service.js';
import { createLogger } from '../../src/core/log.js';
import { gcsBackendPerTest } from '../helpers/gcs-emulator.js';
import { expectCode } from '../helpers/tmp.js';

/* The journal mirror and the reserved area against the emulator, through the real client. */

const ctx = gcsBackendPerTest('journal-mirror-unit');
const log = createLogger('silent');
const AREA = DEFAULTS.gcs.reservedName;

async function openService(state: string, session: string): Promise<JournalService> {
  const view = new ReservedNameLayer(ctx.b, AREA);
  return JournalService.open({ stateDir: state, backend: view, source: ctx.b.location, session, actor: 'test', role: 'test', log, remote: ctx.b.journalArea });
}

/** State directories of this test's hosts (each test has its own prefix, so its own dirs). */
const host = (name: string) => path.join(ctx.tmp, `${ctx.prefix}-${name}`);

async function names(prefix: string): Promise<string[]> {
  const [files] = await ctx.raw.getFiles({ prefix: `${ctx.prefix}/${prefix}` });
  return files.map((f) => f.name.slice(ctx.prefix.length + 1)).sort();
}

describe('reserved area in the view', () => {
  it('is not listed, does not exist for lookups, and cannot be made', async () => {
    await ctx.raw.file(`${ctx.prefix}/${AREA}/journal/w/000001/000000000000`).save('x');
    await ctx.raw.file(`${ctx.prefix}/seen.txt`).save('y');
    const v = new ReservedNameLayer(ctx.b, AREA);
    expect((await v.readdir('/')).map((e) => e.name)).toEqual(['seen.txt']);
    expect((await ctx.b.readdir('/')).map((e) => e.name).sort()).toEqual([AREA, 'seen.txt']); // it is there
    await expectCode(v.stat(`/${AREA}`), 'ENOENT');
    await expectCode(v.readdir(`/${AREA}/journal`), 'ENOENT');
    await expectCode(v.unlink(`/${AREA}/journal/w/000001/000000000000`), 'ENOENT');
    await expectCode(v.mkdir(`/${AREA}`, 0o755), 'EACCES');
    await expectCode(v.open(`/${AREA}`, { write: true, create: true }), 'EACCES');
    await expectCode(v.rename('/seen.txt', `/${AREA}`), 'EACCES');
    await expectCode(v.rename(`/${AREA}`, '/elsewhere'), 'ENOENT');
    // a deeper name that merely starts the same is an ordinary name
    await v.mkdir(`/${AREA}-not`, 0o755);
    expect((await v.readdir('/')).map((e) => e.name).sort()).toEqual([`${AREA}-not`, 'seen.txt']);
  });
});

describe('bucket mirror', () => {
  it('a second state dir imports the first one\'s journal and continues in a segment of its own', async () => {
    const a = host('a');
    const b = host('b');
    const svcA = await openService(a, 'sa');
    const vfsA = svcA.attachDirect();
    await vfsA.mkdir('/d', 0o755);
    await svcA.close();
    const writerA = svcA.mirror?.writer as string;
    expect((await names(`${AREA}/journal/${writerA}/`)).length).toBeGreaterThan(0);

    const svcB = await openService(b, 'sb');
    expect(svcB.startNote).toMatch(/imported \d+ bytes of journal \(1 segment/);
    const vfsB = svcB.attachDirect();
    await vfsB.mkdir('/e', 0o755);
    await svcB.close();
    const writerB = svcB.mirror?.writer as string;
    expect(writerB).not.toBe(writerA);
    // B wrote segment 2: segment 1 is A's, imported
    expect(await names(`${AREA}/journal/${writerB}/`)).toEqual([`${AREA}/journal/${writerB}/000002/000000000000`]);
    const seqs = readJournal(b).records.map((r) => r.record).filter((r) => r.kind === 'op').map((r) => (r as { seq: number }).seq);
    expect(seqs).toEqual([1, 2]);

    // A, started again, imports B's segment and goes on after it; its seq follows B's
    const svcA2 = await openService(a, 'sa2');
    const vfsA2 = svcA2.attachDirect();
    await vfsA2.mkdir('/f', 0o755);
    await svcA2.close();
    expect((await names(`${AREA}/journal/${writerA}/`)).some((n) => n.includes('/000003/'))).toBe(true);
    const ops = readJournal(a).records.map((r) => r.record).filter((r) => r.kind === 'op') as Array<{ seq: number; paths: string[] }>;
    expect(ops.map((o) => [o.seq, o.paths[0]])).toEqual([[1, '/d'], [2, '/e'], [3, '/f']]);
  });

  it('appends to an imported segment only what follows it; a part upload retried finds itself there', async () => {
    const a = host('a');
    const svcA = await openService(a, 'sa');
    const vfsA = svcA.attachDirect();
    await vfsA.mkdir('/one', 0o755);
    await svcA.writer.sync();
    await svcA.mirror?.pump();
    // another host pulls now (segment 1 so far)...
    const c = host('c');
    const layoutC = stateLayout(c);
    fs.mkdirSync(c, { recursive: true });
    const first = await BucketMirror.open({ remote: ctx.b.journalArea, layout: layoutC, log, intervalMs: 1000, retryMs: 100 });
    expect(first.pulled.segments).toBe(1);
    // ...A goes on in the same segment...
    await vfsA.mkdir('/two', 0o755);
    await svcA.close();
    // ...and the next pull appends just the new part
    const again = await BucketMirror.open({ remote: ctx.b.journalArea, layout: layoutC, log, intervalMs: 1000, retryMs: 100 });
    expect(again.pulled.segments).toBe(1);
    expect(fs.readFileSync(path.join(layoutC.journalDir, '000001.log'))).toEqual(fs.readFileSync(path.join(stateLayout(a).journalDir, '000001.log')));
    // an upload of a part that is there already is not an error and changes nothing
    expect(await ctx.b.journalArea.putPart({ writer: svcA.mirror?.writer as string, segment: 1, offset: 0 }, Buffer.from('other'))).toBe(false);
  });

  it('a start lists only the parts it has not seen', async () => {
    const a = host('a');
    const svcA = await openService(a, 'sa');
    const vfsA = svcA.attachDirect();
    for (const d of ['/p1', '/p2', '/p3']) {
      await vfsA.mkdir(d, 0o755);
      await svcA.mirror?.pump();
    }
    const area = ctx.b.journalArea;
    let listed = 0;
    const counting: JournalRemote = {
      location: area.location,
      listWriters: () => area.listWriters(),
      listParts: async (w, from) => {
        const parts = await area.listParts(w, from);
        listed += parts.length;
        return parts;
      },
      putPart: (p, d) => area.putPart(p, d),
      fetchPart: (p, dest) => area.fetchPart(p, dest),
      putBlob: (r, f, n) => area.putBlob(r, f, n),
      fetchBlob: (r, dest) => area.fetchBlob(r, dest),
    };
    const layoutC = stateLayout(host('c'));
    fs.mkdirSync(layoutC.root, { recursive: true });
    await BucketMirror.open({ remote: counting, layout: layoutC, log, intervalMs: 1000, retryMs: 100 });
    expect(listed).toBeGreaterThanOrEqual(3); // one part per pump
    await vfsA.mkdir('/p4', 0o755);
    await svcA.close();
    listed = 0;
    await BucketMirror.open({ remote: counting, layout: layoutC, log, intervalMs: 1000, retryMs: 100 });
    expect(listed).toBe(2); // the last one seen, and the new one
    expect(fs.readFileSync(path.join(layoutC.journalDir, '000001.log'))).toEqual(fs.readFileSync(path.join(stateLayout(a).journalDir, '000001.log')));
  });

  it('a part this spool forgot it uploaded (crash before mirror.json) counts with its real length', async () => {
    const a = host('a');
    const svcA = await openService(a, 'sa');
    const vfsA = svcA.attachDirect();
    await svcA.mirror?.pump();
    const seg1 = path.join(stateLayout(a).journalDir, '000001.log');
    const from = fs.statSync(seg1).size;
    await vfsA.mkdir('/late', 0o755);
    await svcA.writer.sync();
    // the first 10 bytes of what comes next are up already, under the name the mirror will use
    const head = fs.readFileSync(seg1).subarray(from, from + 10);
    expect(await ctx.b.journalArea.putPart({ writer: svcA.mirror?.writer as string, segment: 1, offset: from }, head)).toBe(true);
    await svcA.close();
    const layoutC = stateLayout(host('c'));
    fs.mkdirSync(layoutC.root, { recursive: true });
    await BucketMirror.open({ remote: ctx.b.journalArea, layout: layoutC, log, intervalMs: 1000, retryMs: 100 });
    expect(fs.readFileSync(path.join(layoutC.journalDir, '000001.log'))).toEqual(fs.readFileSync(seg1));
  });

  it('two writers at once: records appended to a segment after later ones exist are not imported (no seq is used twice)', async () => {
    const a = host('a');
    const b = host('b');
    const svcA = await openService(a, 'sa');
    const vfsA = svcA.attachDirect();
    await vfsA.mkdir('/a1', 0o755);
    await svcA.writer.sync();
    await svcA.mirror?.pump();
    const svcB = await openService(b, 'sb'); // imports A's segment 1 while A goes on
    await svcB.attachDirect().mkdir('/b1', 0o755);
    await svcB.close();
    await vfsA.mkdir('/a2', 0o755); // same seq as B's /b1
    await svcA.close();
    const seg1 = path.join(stateLayout(b).journalDir, '000001.log');
    const before = fs.statSync(seg1).size;
    const svcB2 = await openService(b, 'sb2');
    await svcB2.close();
    expect(fs.statSync(seg1).size).toBe(before);
    const seqs = readJournal(b).records.map((r) => r.record).filter((r) => r.kind === 'op').map((r) => (r as { seq: number }).seq);
    expect(new Set(seqs).size).toBe(seqs.length);
  });

  it('before-images of clean objects are server-side copies; fetched and checked on another host', async () => {
    await ctx.raw.file(`${ctx.prefix}/f.txt`).save('before\n');
    const a = host('a');
    const svcA = await openService(a, 'sa');
    const vfsA = svcA.attachDirect();
    await vfsA.unlink('/f.txt');
    await svcA.close();
    expect(svcA.mirror?.stats.blobs).toBe(0); // nothing uploaded from the spool
    const kept = await names(`${AREA}/blobs/`);
    expect(kept).toHaveLength(1);
    expect(kept[0]).toMatch(/^\.ledgerfs\/blobs\/gcs\/\d+-[0-9a-f]{16}$/);

    const blobs = new BlobStore(path.join(host('b'), 'blobs'));
    blobs.mirror = { committed: () => undefined, fetch: (ref, dest) => ctx.b.journalArea.fetchBlob(ref, dest) };
    const ref = `gcs-${(kept[0] as string).split('/').pop() as string}`;
    await blobs.ensure([ref]);
    expect(blobs.read(ref).toString()).toBe('before\n');
    await expectCode(blobs.ensure([`gcs-1-${'0'.repeat(16)}`]), 'EIO');
  });
});
