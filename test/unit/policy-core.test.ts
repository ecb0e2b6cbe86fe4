import { constants as C } from 'node:fs';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openWorkspace } from '../../src/app/workspace.js';
import { describePolicy } from '../../src/policy/describe.js';
import type { Caller } from '../../src/vfs/pipeline.js';
import { CASE_FILES, CASE_POLICY, policyFixture, putFiles, type PolicyFixture } from '../helpers/policy.js';
import { expectCode, makeTemp, rmTemp } from '../helpers/tmp.js';

const W = '/projects/Wilson-MVA';
const OPERATOR: Caller = { operator: true };
let f: PolicyFixture | undefined;

async function caseFixture(body = CASE_POLICY, files = CASE_FILES): Promise<PolicyFixture> {
  f = await policyFixture(body, (src) => putFiles(src, files));
  return f;
}

afterEach(async () => {
  await f?.close();
  f = undefined;
});

const names = async (fx: PolicyFixture, p: string) => (await fx.vfs.readdir(p)).sort();

describe('policy view: what exists', () => {
  it('synthesizes read-only parents that list only the way to the roots', async () => {
    const fx = await caseFixture();
    expect(await names(fx, '/')).toEqual(['.ledgerfs', 'Tools', 'projects', 'scratch']);
    expect(await names(fx, '/projects')).toEqual(['Wilson-MVA']); // not Other-Case
    const st = await fx.vfs.getattr('/projects');
    expect(st.type).toBe('dir');
    expect(st.mode & 0o7777).toBe(0o555);
    await expectCode(fx.vfs.getattr('/projects/Other-Case'), 'ENOENT');
    await expectCode(fx.vfs.getattr('/unexposed.txt'), 'ENOENT');
    await expectCode(fx.vfs.readdir('/projects/Other-Case'), 'ENOENT');
  });

  it('hides globbed names: ENOENT and absent from listings', async () => {
    const fx = await caseFixture();
    expect(await names(fx, W)).toEqual(['intake', 'notes.md']);
    expect(await names(fx, '/Tools')).toEqual(['build.py']);
    await expectCode(fx.vfs.getattr(`${W}/.env`), 'ENOENT');
    await expectCode(fx.vfs.open(`${W}/.env`, C.O_RDONLY), 'ENOENT');
    await expectCode(fx.vfs.getattr('/Tools/key.pem'), 'ENOENT');
  });

  it('maps a root onto another backend prefix', async () => {
    const fx = await caseFixture();
    await fx.writeFile('/scratch/a.bin', 'x');
    expect(fs.readFileSync(path.join(fx.src, 'tmp-area/a.bin'), 'utf8')).toBe('x');
    expect(await names(fx, '/scratch')).toEqual(['a.bin']);
  });

  it('serves /.ledgerfs read-only, with sizes that match the text', async () => {
    const fx = await caseFixture();
    expect(await names(fx, '/.ledgerfs')).toEqual(['denials', 'policy', 'session', 'usage']);
    for (const n of ['policy', 'usage', 'denials', 'session']) {
      const st = await fx.vfs.getattr(`/.ledgerfs/${n}`);
      const text = await fx.readFile(`/.ledgerfs/${n}`);
      expect(Buffer.byteLength(text)).toBe(st.size);
    }
    expect(await fx.readFile('/.ledgerfs/policy')).toMatch(/\/projects\/Wilson-MVA {2}read-write/);
    await expectCode(fx.vfs.open('/.ledgerfs/usage', C.O_WRONLY), 'EROFS');
    await expectCode(fx.vfs.create('/.ledgerfs/x', 0o644, C.O_CREAT | C.O_WRONLY), 'EROFS');
    await expectCode(fx.vfs.unlink('/.ledgerfs/policy'), 'EROFS');
  });

  it('adds what the mount reports (a state directory low on space) to /.ledgerfs/usage', async () => {
    const fx = await caseFixture();
    expect(await fx.readFile('/.ledgerfs/usage')).not.toMatch(/low on space/);
    let note: string | null = 'warning: the journal\'s state directory is low on space: 1.0 MiB free of 2.0 MiB';
    fx.policy.view.usageNotes = () => note;
    await fx.vfs.getattr('/.ledgerfs/usage');
    expect(await fx.readFile('/.ledgerfs/usage')).toMatch(/\nwarning: the journal's state directory is low on space: 1.0 MiB free of 2.0 MiB\n$/);
    note = null;
    await fx.vfs.getattr('/.ledgerfs/usage');
    expect(await fx.readFile('/.ledgerfs/usage')).not.toMatch(/low on space/);
  });

  it('keeps an open /.ledgerfs file at the text its last stat reported', async () => {
    const fx = await caseFixture();
    const before = (await fx.vfs.getattr('/.ledgerfs/denials')).size;
    await expectCode(fx.writeFile('/Tools/x', 'y'), 'EROFS'); // a new denial: the text grows
    const fh = await fx.vfs.open('/.ledgerfs/denials', C.O_RDONLY);
    const buf = Buffer.alloc(4096);
    expect(await fx.vfs.read(fh, buf, buf.length, 0)).toBe(before); // what the kernel was told
    await fx.vfs.release(fh);
    expect(await fx.readFile('/.ledgerfs/denials')).toBe(await fx.readFile('/.ledgerfs/denials'));
    await fx.vfs.getattr('/.ledgerfs/denials'); // the kernel asks again: now it is there
    expect(await fx.readFile('/.ledgerfs/denials')).toMatch(/create \/Tools\/x EROFS/);
  });

  it('reports statfs from the root quota', async () => {
    const fx = await caseFixture();
    const s = await fx.vfs.statfs(`${W}/notes.md`);
    expect(s.blocks * s.bsize).toBeGreaterThanOrEqual(1000);
    expect(s.blocks).toBe(Math.ceil(1000 / s.bsize));
    expect(s.files).toBe(10);
    expect(s.ffree).toBe(10 - fx.usage(0).files);
  });
});

describe('policy stage: rules', () => {
  it('refuses changes in a read-only root with EROFS, at open and on every mutation', async () => {
    const fx = await caseFixture();
    await expectCode(fx.vfs.open('/Tools/build.py', C.O_WRONLY), 'EROFS');
    await expectCode(fx.vfs.open('/Tools/build.py', C.O_WRONLY | C.O_TRUNC), 'EROFS');
    await expectCode(fx.vfs.create('/Tools/x', 0o644, C.O_CREAT | C.O_WRONLY), 'EROFS');
    await expectCode(fx.vfs.mkdir('/Tools/d', 0o755), 'EROFS');
    await expectCode(fx.vfs.unlink('/Tools/build.py'), 'EROFS');
    await expectCode(fx.vfs.truncate('/Tools/build.py', 0), 'EROFS');
    await expectCode(fx.vfs.chmod('/Tools/build.py', 0o777), 'EROFS');
    await expectCode(fx.vfs.utimens('/Tools/build.py', { mtimeNs: 'now' }), 'EROFS');
    await expectCode(fx.vfs.symlink('x', '/Tools/l'), 'EROFS');
    await expectCode(fx.vfs.mkdir('/projects/new', 0o755), 'EROFS');
    await expectCode(fx.vfs.rmdir(W), 'EROFS');
    expect(fs.readFileSync(path.join(fx.src, 'Tools/build.py'), 'utf8')).toBe('print(1)\n');
    const last = fx.policy.denials.list().at(-1);
    expect(last?.reason).toBe('remove directory /projects/Wilson-MVA refused: /projects/Wilson-MVA is a root of the view; it cannot be removed or renamed');
  });

  it('refuses hidden names: ENOENT for existing ones, EACCES to create them', async () => {
    const fx = await caseFixture();
    await expectCode(fx.vfs.unlink(`${W}/.env`), 'ENOENT');
    await expectCode(fx.vfs.rename(`${W}/.env`, `${W}/env.txt`), 'ENOENT');
    await expectCode(fx.vfs.create(`${W}/.env`, 0o644, C.O_CREAT | C.O_WRONLY | C.O_TRUNC), 'EACCES');
    await expectCode(fx.vfs.rename(`${W}/notes.md`, `${W}/.env`), 'EACCES');
    expect(fs.readFileSync(path.join(fx.src, 'projects/Wilson-MVA/.env'), 'utf8')).toBe('SECRET=1\n');
  });

  it('refuses readonly globs and disallowed suffixes with EACCES', async () => {
    const fx = await caseFixture();
    await expectCode(fx.vfs.open(`${W}/intake/form.pdf`, C.O_RDWR), 'EACCES');
    await expectCode(fx.vfs.unlink(`${W}/intake/form.pdf`), 'EACCES');
    await expectCode(fx.writeFile(`${W}/intake/new.pdf`, 'x'), 'EACCES');
    await expectCode(fx.vfs.rename(`${W}/intake`, `${W}/moved`), 'EACCES'); // would free form.pdf
    await expectCode(fx.writeFile(`${W}/run.sh`, 'x'), 'EACCES');
    await expectCode(fx.vfs.rename(`${W}/notes.md`, `${W}/notes.exe`), 'EACCES');
    await expectCode(fx.vfs.symlink('notes.md', `${W}/link`), 'EACCES');
    await fx.writeFile(`${W}/ok.TXT`, 'fine');
    await fx.vfs.mkdir(`${W}/dir.without.suffix`, 0o755);
    expect(fx.policy.denials.list().at(-1)?.code).toBe('EACCES');
  });

  it('keeps a hard link from making a read-only file writable, and keeps links inside a root', async () => {
    const fx = await caseFixture();
    await expectCode(fx.vfs.link(`${W}/intake/form.pdf`, `${W}/form.pdf`), 'EACCES');
    await expectCode(fx.vfs.link('/Tools/build.py', `${W}/build.txt`), 'EXDEV');
    await expectCode(fx.vfs.link(`${W}/notes.md`, '/scratch/notes.md'), 'EXDEV');
    await fx.vfs.link(`${W}/notes.md`, `${W}/notes-link.md`);
  });

  it('refuses rename across roots with EXDEV', async () => {
    const fx = await caseFixture();
    await expectCode(fx.vfs.rename(`${W}/notes.md`, '/scratch/notes.md'), 'EXDEV');
    await expectCode(fx.vfs.rename('/Tools/build.py', `${W}/build.txt`), 'EXDEV');
    expect(fx.policy.denials.list().at(-1)?.reason).toMatch(/different roots \(\/Tools, \/projects\/Wilson-MVA\); copy and delete instead/);
  });

  it('refuses a write or truncate past maxFileBytes with EFBIG, leaving the file as it was', async () => {
    const fx = await caseFixture();
    const fh = await fx.vfs.create(`${W}/big.txt`, 0o644, C.O_CREAT | C.O_RDWR);
    await fx.vfs.write(fh, Buffer.alloc(400), 400, 0);
    await expectCode(fx.vfs.write(fh, Buffer.alloc(1), 1, 400), 'EFBIG');
    await expectCode(fx.vfs.ftruncate(fh, 401), 'EFBIG');
    await fx.vfs.write(fh, Buffer.alloc(10), 10, 100); // inside the file: fine
    await fx.vfs.release(fh);
    expect(fs.statSync(path.join(fx.src, 'projects/Wilson-MVA/big.txt')).size).toBe(400);
    expect(fx.policy.denials.list().at(-1)?.reason).toMatch(/would grow to 401 B, past the largest file size of \/projects\/Wilson-MVA \(400 B\)/);
  });

  it('refuses what passes the byte quota with EDQUOT, and the quota is untouched by the refusal', async () => {
    const fx = await caseFixture(CASE_POLICY.replace('maxFileBytes: 400', 'maxFileBytes: 10000'));
    const used = fx.usage(0).bytes;
    const fh = await fx.vfs.create(`${W}/fill.txt`, 0o644, C.O_CREAT | C.O_RDWR);
    let pos = 0;
    let err: unknown;
    for (;;) {
      try {
        await fx.vfs.write(fh, Buffer.alloc(100), 100, pos);
        pos += 100;
      } catch (e) {
        err = e;
        break;
      }
    }
    expect((err as { code: string }).code).toBe('EDQUOT');
    expect(fx.usage(0).bytes).toBe(used + pos);
    expect(fx.usage(0).bytes).toBeLessThanOrEqual(1000);
    await expectCode(fx.vfs.ftruncate(fh, pos + 1000), 'EDQUOT');
    await expectCode(fx.vfs.symlink('x'.repeat(200), `${W}/l.txt`), 'EDQUOT');
    await fx.vfs.release(fh);
    expect(fx.usage(0)).toEqual(await fx.recount(0));
  });

  it('refuses what passes the file quota with EDQUOT (create, mkdir, symlink)', async () => {
    const fx = await caseFixture();
    const start = fx.usage(0).files;
    for (let i = start; i < 10; i++) await fx.vfs.mkdir(`${W}/d${i}`, 0o755);
    await expectCode(fx.vfs.mkdir(`${W}/one-more`, 0o755), 'EDQUOT');
    await expectCode(fx.writeFile(`${W}/one-more.txt`, ''), 'EDQUOT');
    await expectCode(fx.vfs.symlink('x', `${W}/one-more.md`), 'EDQUOT');
    expect(fx.usage(0)).toEqual(await fx.recount(0));
    await fx.vfs.rmdir(`${W}/d9`);
    await fx.writeFile(`${W}/now-fits.txt`, '');
  });

  it('lets an operator through the rules, and still counts', async () => {
    const fx = await caseFixture();
    const before = fx.usage(0);
    await fx.writeFile(`${W}/restored.sh`, 'echo hi', OPERATOR);
    await fx.vfs.unlink(`${W}/intake/form.pdf`, OPERATOR);
    expect(fx.usage(0)).toEqual({ bytes: before.bytes + 7 - 3, files: before.files });
    expect(fx.usage(0)).toEqual(await fx.recount(0));
    // an operator may open and write a read-only root's file (rollback restoring it)
    const fh = await fx.vfs.open('/Tools/build.py', C.O_WRONLY | C.O_TRUNC, OPERATOR);
    await fx.vfs.write(fh, Buffer.from('restored\n'), 9, 0, OPERATOR);
    await fx.vfs.release(fh, OPERATOR);
    expect(fs.readFileSync(path.join(fx.src, 'Tools/build.py'), 'utf8')).toBe('restored\n');
    expect(fx.policy.denials.size).toBe(0); // operator actions are not denials
    // the shape of the view still holds for an operator
    await expectCode(fx.vfs.rename(`${W}/notes.md`, '/scratch/notes.md', OPERATOR), 'EXDEV');
  });
});

describe('policy stage: usage stays exact', () => {
  const body = CASE_POLICY.replace('maxFileBytes: 400', 'maxFileBytes: 100000').replace('{ bytes: 1000, files: 10 }', '{ bytes: 100000, files: 100 }');

  it('counts at mount: files, directories, symlinks, hidden files, hard links once', async () => {
    const fx = await caseFixture(body, {
      ...CASE_FILES,
      'projects/Wilson-MVA/d/e/f.txt': '12345',
    });
    fs.symlinkSync('notes.md', path.join(fx.src, 'projects/Wilson-MVA/ln'));
    fs.linkSync(path.join(fx.src, 'projects/Wilson-MVA/d/e/f.txt'), path.join(fx.src, 'projects/Wilson-MVA/hard.txt'));
    // notes.md intake intake/form.pdf d d/e d/e/f.txt(=hard.txt) ln; .env is hidden: apart
    expect(await fx.recount(0)).toEqual({ bytes: 6 + 3 + 5 + 8, files: 7 });
    // the fixture counted before the symlink and link were made beside it: a fresh mount agrees
    const ws = await openWorkspace({ policy: fx.file });
    const root = ws.policy?.compiled.roots[0] as never;
    expect(ws.policy?.usage.of(root)).toEqual({ bytes: 22, files: 7 });
    expect(ws.policy?.usage.hiddenOf(root)).toEqual({ bytes: 9, files: 1 });
    await ws.backend.close();
  });

  it('follows overwrite, truncate, rename over a file, hard links and symlinks', async () => {
    const fx = await caseFixture(body);
    const check = async () => expect(fx.usage(0)).toEqual(await fx.recount(0));
    await fx.writeFile(`${W}/a.txt`, 'hello world');
    await check();
    await fx.writeFile(`${W}/a.txt`, 'hi'); // O_TRUNC then write
    await check();
    const fh = await fx.vfs.open(`${W}/a.txt`, C.O_RDWR);
    await fx.vfs.write(fh, Buffer.from('xyz'), 3, 10); // a hole, then growth
    await fx.vfs.write(fh, Buffer.from('a'), 1, 0); // inside
    await fx.vfs.ftruncate(fh, 5);
    await fx.vfs.release(fh);
    await check();
    await fx.vfs.truncate(`${W}/a.txt`, 50);
    await check();
    await fx.writeFile(`${W}/b.txt`, 'bbbbbbbbbb');
    await fx.vfs.rename(`${W}/b.txt`, `${W}/a.txt`);
    await check();
    await fx.vfs.link(`${W}/a.txt`, `${W}/a2.txt`);
    await check();
    await fx.vfs.unlink(`${W}/a.txt`);
    await check();
    await fx.vfs.symlink('a2.txt', `${W}/s.md`);
    await check();
    await fx.vfs.mkdir(`${W}/dir`, 0o755);
    await fx.vfs.rename(`${W}/s.md`, `${W}/dir/s.md`);
    await fx.vfs.unlink(`${W}/dir/s.md`);
    await fx.vfs.rmdir(`${W}/dir`);
    await check();
    await fx.vfs.create(`${W}/x.md`, 0o644, C.O_CREAT | C.O_EXCL | C.O_WRONLY).then((h) => fx.vfs.release(h));
    await expectCode(fx.vfs.create(`${W}/x.md`, 0o644, C.O_CREAT | C.O_EXCL | C.O_WRONLY), 'EEXIST');
    await check();
  });

  it('keeps the space of a file unlinked while open until its last close, as a disk does', async () => {
    const fx = await caseFixture(body);
    await fx.writeFile(`${W}/tmp.txt`, 'x'.repeat(100));
    const base = fx.usage(0);
    const fh = await fx.vfs.open(`${W}/tmp.txt`, C.O_RDWR);
    await fx.vfs.unlink(`${W}/tmp.txt`);
    expect(fx.usage(0)).toEqual(base);
    await fx.vfs.write(fh, Buffer.alloc(50), 50, 100); // still charged, still limited
    expect(fx.usage(0).bytes).toBe(base.bytes + 50);
    await fx.vfs.release(fh);
    expect(fx.usage(0)).toEqual({ bytes: base.bytes - 100, files: base.files - 1 });
    expect(fx.usage(0)).toEqual(await fx.recount(0));
  });

  it('keeps the space of a file replaced by rename while open until its last close', async () => {
    const fx = await caseFixture(body);
    await fx.writeFile(`${W}/old.txt`, 'o'.repeat(40));
    await fx.writeFile(`${W}/new.txt`, 'n'.repeat(10));
    const fh = await fx.vfs.open(`${W}/old.txt`, C.O_RDONLY);
    await fx.vfs.rename(`${W}/new.txt`, `${W}/old.txt`);
    const charged = (await fx.recount(0)).bytes + 40;
    expect(fx.usage(0).bytes).toBe(charged);
    await fx.vfs.release(fh);
    expect(fx.usage(0)).toEqual(await fx.recount(0));
  });

  it('keeps usage exact when a file open under a name it lost is also open under its other name', async () => {
    // ln c a; rm c with c open: the inode has one name (nlink 1) but two ways in. A size
    // remembered by one handle missed changes through the other, and each round of this
    // took ~360 bytes off the usage: enough rounds, and the quota no longer held.
    const fx = await caseFixture(body);
    const check = async () => expect(fx.usage(0)).toEqual(await fx.recount(0));
    const base = fx.usage(0);
    for (let round = 0; round < 3; round++) {
      const c = await fx.vfs.create(`${W}/c.txt`, 0o644, C.O_CREAT | C.O_RDWR);
      await fx.vfs.write(c, Buffer.alloc(300, 120), 300, 0);
      await fx.vfs.link(`${W}/c.txt`, `${W}/a.txt`);
      await fx.vfs.unlink(`${W}/c.txt`);
      const a = await fx.vfs.open(`${W}/a.txt`, C.O_RDWR);
      await fx.vfs.ftruncate(c, 250);
      await check();
      await fx.vfs.ftruncate(a, 200); // a's remembered 300 was old
      await check();
      await fx.vfs.write(a, Buffer.alloc(50, 121), 50, 250); // and the other way round
      await fx.vfs.ftruncate(c, 280);
      await check();
      await fx.vfs.write(a, Buffer.alloc(20, 122), 20, 300);
      await check();
      await fx.vfs.release(c);
      await fx.vfs.release(a);
      await check();
      await fx.vfs.unlink(`${W}/a.txt`);
      await check();
    }
    expect(fx.usage(0)).toEqual(base);
  });

  it('gives back a reservation when the backend fails', async () => {
    const fx = await caseFixture(body);
    const before = fx.usage(0);
    await expectCode(fx.vfs.mkdir(`${W}/notes.md`, 0o755), 'EEXIST');
    await expectCode(fx.vfs.symlink('x', `${W}/notes.md`), 'EEXIST');
    await expectCode(fx.vfs.mkdir(`${W}/no/such/dir`, 0o755), 'ENOENT');
    expect(fx.usage(0)).toEqual(before);
  });
});

describe('policy view: nothing tells a program that hidden names exist', () => {
  it('/.ledgerfs/policy names roots by their view paths only: no backend, source or file path', async () => {
    const fx = await caseFixture();
    const text = await fx.readFile('/.ledgerfs/policy');
    expect(text).toMatch(/^  \/scratch {2}read-write$/m);
    expect(text).toMatch(/^backend: a local directory$/m);
    for (const host of [fx.src, fx.dir, fx.file, '/tmp-area', 'backend /']) expect(text).not.toContain(host);
    // the operator's own description (policy check) says where everything is
    const full = describePolicy(fx.policy.compiled);
    expect(full).toContain(fx.src);
    expect(full).toContain('(backend /tmp-area)');
  });

  it('hidden names cost nothing in the usage, quota and df the program sees', async () => {
    // 1000 bytes of quota; 400 bytes of hidden key beside 6 of notes and 3 of form.pdf
    const fx = await caseFixture(CASE_POLICY.replace('maxFileBytes: 400', 'maxFileBytes: 1000'), { ...CASE_FILES, 'projects/Wilson-MVA/id.pem': 'k'.repeat(400) });
    expect(fx.usage(0)).toEqual({ bytes: 9, files: 3 });
    expect(fx.policy.usage.hiddenOf(fx.policy.compiled.roots[0] as never)).toEqual({ bytes: 409, files: 2 });
    const df = await fx.vfs.statfs(`${W}/notes.md`);
    expect(df.bavail).toBe(Math.floor((1000 - 9) / df.bsize));
    expect(df.ffree).toBe(10 - 3);
    expect(await fx.readFile('/.ledgerfs/usage')).toContain(`${W} bytes=9 files=3 quota_bytes=1000`);
    // the whole quota is the program's: 991 more bytes fit, one more does not
    await fx.writeFile(`${W}/fill.txt`, 'f'.repeat(991));
    await expectCode(fx.writeFile(`${W}/one.txt`, 'x'), 'EDQUOT');
    expect(await fx.readFile('/.ledgerfs/denials')).not.toMatch(/pem|env|hidden/);
    expect(fx.usage(0)).toEqual(await fx.recount(0));
  });

  it('rmdir of a directory holding only hidden names succeeds: they are kept beside it, and come back with the name', async () => {
    const fx = await caseFixture(CASE_POLICY, { ...CASE_FILES, 'projects/Wilson-MVA/d/.env': 'A=1\n', 'projects/Wilson-MVA/d/sub/k.pem': 'K', 'projects/Wilson-MVA/d/v.md': 'v' });
    const src = (p: string) => path.join(fx.src, 'projects/Wilson-MVA', p);
    const start = fx.usage(0);
    // a visible name left: the ENOTEMPTY is the truth
    await expectCode(fx.vfs.rmdir(`${W}/d`), 'ENOTEMPTY');
    await fx.vfs.unlink(`${W}/d/v.md`);
    expect(await names(fx, `${W}/d/sub`)).toEqual([]);
    // what rm -r does: the (seemingly) empty sub, then d
    await fx.vfs.rmdir(`${W}/d/sub`);
    expect(await names(fx, `${W}/d`)).toEqual([]);
    await fx.vfs.rmdir(`${W}/d`);
    await expectCode(fx.vfs.getattr(`${W}/d`), 'ENOENT');
    expect(await names(fx, W)).toEqual(['intake', 'notes.md']);
    // nothing hidden was deleted: the operator finds it beside, under a name no view shows
    expect(fs.readFileSync(src('.ledgerfs-kept.1.d/.env'), 'utf8')).toBe('A=1\n');
    expect(fs.readFileSync(src('.ledgerfs-kept.1.d/.ledgerfs-kept.1.sub/k.pem'), 'utf8')).toBe('K');
    await expectCode(fx.vfs.getattr(`${W}/.ledgerfs-kept.1.d`), 'ENOENT');
    await expectCode(fx.vfs.mkdir(`${W}/.ledgerfs-kept.1.d`, 0o755), 'EACCES');
    expect(fx.usage(0)).toEqual({ bytes: start.bytes - 1, files: start.files - 3 });
    expect(fx.usage(0)).toEqual(await fx.recount(0));
    // the name made again: the directory comes back, still looking empty
    await fx.vfs.mkdir(`${W}/d`, 0o700);
    expect(await names(fx, `${W}/d`)).toEqual([]);
    expect(fs.readFileSync(src('d/.env'), 'utf8')).toBe('A=1\n');
    expect(fs.statSync(src('d')).mode & 0o777).toBe(0o700);
    await fx.vfs.mkdir(`${W}/d/sub`, 0o755);
    expect(fs.readFileSync(src('d/sub/k.pem'), 'utf8')).toBe('K');
    expect(fs.readdirSync(src('.'))).not.toContain('.ledgerfs-kept.1.d');
    expect(fx.usage(0)).toEqual(await fx.recount(0));
    // a rename over it, as over an empty directory: it goes aside again
    await fx.vfs.mkdir(`${W}/e`, 0o755);
    await fx.writeFile(`${W}/e/n.md`, 'n');
    await fx.vfs.rmdir(`${W}/d/sub`);
    await fx.vfs.rename(`${W}/e`, `${W}/d`);
    expect(await names(fx, `${W}/d`)).toEqual(['n.md']);
    expect(fs.readFileSync(src('.ledgerfs-kept.1.d/.env'), 'utf8')).toBe('A=1\n');
    expect(fx.usage(0)).toEqual(await fx.recount(0));
  });
});

describe('openWorkspace', () => {
  it('refuses --source with --policy, a missing root and an unreachable gcs bucket', async () => {
    const dir = makeTemp('policy');
    try {
      const file = path.join(dir, 'p.yaml');
      fs.mkdirSync(path.join(dir, 'src'));
      fs.writeFileSync(file, 'backend: {type: local, path: ./src}\nroots: [{path: /a, mode: rw}]');
      await expect(openWorkspace({ policy: file, source: dir })).rejects.toThrow(/cannot be used together/);
      await expect(openWorkspace({ policy: file })).rejects.toThrow(/roots\[0\]: \/a is not a directory in/);
      // nothing listens on port 1: the bucket cannot be reached, and the error says which
      fs.writeFileSync(file, 'backend: {type: gcs, bucket: b, apiEndpoint: "http://127.0.0.1:1"}\nroots: [{path: /a}]');
      await expect(openWorkspace({ policy: file, state: path.join(dir, 'state') })).rejects.toThrow(/GCS bucket "b" could not be reached/);
    } finally {
      rmTemp(dir);
    }
  });

  it('refuses a state directory any root reaches, whatever the policy hides (the attack of issue 13.5)', async () => {
    const dir = makeTemp('policy');
    try {
      fs.mkdirSync(path.join(dir, 'src/work/.journal'), { recursive: true });
      fs.mkdirSync(path.join(dir, 'src/other'), { recursive: true });
      const file = path.join(dir, 'p.yaml');
      // the journal under a writable root, hidden by the policy: renaming work/ would show it
      fs.writeFileSync(file, 'backend: {type: local, path: ./src}\nroots: [{path: /, mode: rw}]\nhide: [".journal"]\nstate: ./src/work/.journal');
      const real = fs.realpathSync(path.join(dir, 'src'));
      await expect(openWorkspace({ policy: file })).rejects.toThrow(
        new RegExp(`state directory .*src/work/\\.journal lies inside root / \\(${real}\\): programs could reach the journal`),
      );
      // --state names it just as well; a root below the state directory is no better
      fs.writeFileSync(file, 'backend: {type: local, path: ./src}\nroots: [{path: /w, source: /work, mode: rw}]');
      await expect(openWorkspace({ policy: file, state: path.join(dir, 'src/work/deeper') })).rejects.toThrow(/lies inside root \/w \(.*src\/work\)/);
      await expect(openWorkspace({ policy: file, state: path.join(dir, 'src') })).rejects.toThrow(/root \/w \(.*src\/work\) lies inside the state directory/);
      // --no-journal: no state directory is used, nothing to refuse
      const nj = await openWorkspace({ policy: file, state: path.join(dir, 'src/work'), noJournal: true });
      await nj.backend.close();
      // inside the backend but outside every root: no path of the view leads there
      const ws = await openWorkspace({ policy: file, state: path.join(dir, 'src/other/state') });
      expect((await ws.backend.readdir('/')).map((e) => e.name).sort()).toEqual(['.ledgerfs', 'w']);
      await ws.backend.close();
      // a plain --source: the whole backend is the one root
      await expect(openWorkspace({ source: path.join(dir, 'src'), state: path.join(dir, 'src/other/state') })).rejects.toThrow(/lies inside the source/);
    } finally {
      rmTemp(dir);
    }
  });
});
