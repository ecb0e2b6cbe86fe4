import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { GcsBackend } from '../../src/backend/gcs.js';
import { gcsBackendPerTest } from '../helpers/gcs-emulator.js';

// chmod/chown/utimens answer the node's new attributes, and a directory this backend made or
// patched is patched without a lookup first (tar's directory fix-ups): the placeholder's
// generation from our own last answer is only a first guess, which the preconditions check.

const ctx = gcsBackendPerTest('attrs-test');
let b: GcsBackend;
beforeEach(() => {
  b = ctx.b;
});
const requests = async () => (await ctx.fx.stats()).requests;

describe('GCS attribute changes', () => {
  it('of a directory just made: one patch each, answering the new attributes', async () => {
    await b.mkdir('/d', 0o755);
    const r0 = await requests();
    const a1 = await b.chown('/d', 1234, 5678);
    const a2 = await b.chmod('/d', 0o700);
    const a3 = await b.utimens('/d', { mtimeNs: 981173106_000000000n });
    expect(await requests()).toBe(r0 + 3);
    expect(a1 && [a1.type, a1.uid, a1.gid]).toEqual(['dir', 1234, 5678]);
    expect(a2 && a2.mode & 0o7777).toBe(0o700);
    expect(a3 && a3.mtimeNs).toBe(981173106_000000000n);
    // what a lookup now says is what the patches answered
    expect(await b.stat('/d')).toEqual(a3);
  });

  it('of a file (not open): the answer is the file as stat shows it', async () => {
    const f = await b.open('/f', { write: true, create: true }, 0o644);
    await f.write(Buffer.from('x'), 1, 0);
    await f.close();
    const a = await b.chmod('/f', 0o600);
    expect(a).toEqual(await b.stat('/f'));
    expect(a && a.mode & 0o777).toBe(0o600);
  });

  it('a directory another client patched meanwhile: the stale guess fails its precondition, the patch is redone on what is there', async () => {
    await b.mkdir('/p', 0o755);
    await ctx.raw.file(`${ctx.prefix}/p/`).setMetadata({ metadata: { other: 'kept' } });
    const a = await b.chmod('/p', 0o711);
    expect(a && a.mode & 0o7777).toBe(0o711);
    const [meta] = await ctx.raw.file(`${ctx.prefix}/p/`).getMetadata();
    expect(meta.metadata).toMatchObject({ other: 'kept', 'goog-reserved-posix-mode': '711' });
  });

  it('a directory whose placeholder another client removed (objects below remain): a new placeholder carries the change', async () => {
    await b.mkdir('/q', 0o755);
    await ctx.raw.file(`${ctx.prefix}/q/inside`).save('x');
    await ctx.raw.file(`${ctx.prefix}/q/`).delete();
    const a = await b.chmod('/q', 0o750);
    expect(a && [a.type, a.mode & 0o7777]).toEqual(['dir', 0o750]);
    const [meta] = await ctx.raw.file(`${ctx.prefix}/q/`).getMetadata();
    expect(meta.metadata?.['goog-reserved-posix-mode']).toBe('750');
  });

  it('a file renamed does not walk the hints (git renames every object it writes); a directory renamed drops those below it', async () => {
    await b.mkdir('/t', 0o755);
    await b.mkdir('/t/u', 0o755);
    const f = await b.open('/t/tmp_obj', { write: true, create: true }, 0o644);
    await f.write(Buffer.from('x'), 1, 0);
    await f.close();
    const walks = vi.spyOn(b['placeholders'], 'keys');
    try {
      await b.rename('/t/tmp_obj', '/t/obj');
      expect(walks).not.toHaveBeenCalled();
      await b.rename('/t', '/v');
      expect(walks).toHaveBeenCalled();
    } finally {
      walks.mockRestore();
    }
    // another client makes /t/u again: no hint of the old one is left to try first
    await ctx.raw.file(`${ctx.prefix}/t/u/`).save('');
    const r0 = await requests();
    const a = await b.chmod('/t/u', 0o700);
    expect(a && a.mode & 0o7777).toBe(0o700);
    expect((await requests()) - r0).toBe(3); // the lookup (object and prefix) and the patch, no failed precondition first
    expect((await b.stat('/v/u')).type).toBe('dir');
  });

  it('a directory renamed away and another made in its place: the new one is patched', async () => {
    await b.mkdir('/r', 0o755);
    await b.rename('/r', '/s');
    await b.mkdir('/r', 0o755);
    await b.chmod('/r', 0o700);
    await b.chmod('/s', 0o710);
    expect((await b.stat('/r')).mode & 0o7777).toBe(0o700);
    expect((await b.stat('/s')).mode & 0o7777).toBe(0o710);
  });
});
