import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadBeneath, type Beneath } from '../../src/backend/beneath.js';
import { fdLimit, raiseFdLimit } from '../../src/backend/fd-limit.js';
import { poolSize } from '../../src/backend/fd-pool.js';
import { LocalBackend } from '../../src/backend/local.js';
import type { BackendFile } from '../../src/core/index.js';
import { DEFAULTS } from '../../src/config/defaults.js';
import { expectCode, makeTemp, rmTemp } from '../helpers/tmp.js';

/** descriptors of this process that point into `dir` */
function fdsInto(dir: string): number {
  let n = 0;
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    try {
      if (fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(dir + '/')) n++;
    } catch {
      /* closed meanwhile */
    }
  }
  return n;
}

/** whether this process has a descriptor open on `file` */
function holds(file: string): boolean {
  return fs.readdirSync('/proc/self/fd').some((fd) => {
    try {
      return fs.readlinkSync(`/proc/self/fd/${fd}`) === file;
    } catch {
      return false;
    }
  });
}

async function text(f: BackendFile): Promise<string> {
  const buf = Buffer.alloc(64);
  const n = await f.read(buf, 64, 0);
  return buf.subarray(0, n).toString();
}

const beneath = loadBeneath();
const helpers: [string, Beneath | null][] = [['realpath', null]];
if (beneath) helpers.unshift(['openat2', beneath]);

describe.each(helpers)('LocalBackend descriptor pool (%s)', (_, helper) => {
  let tmp: string;
  let root: string;
  let b: LocalBackend;
  const log: string[] = [];
  const logger = { warn: (o: unknown, msg: string) => log.push(`${JSON.stringify(o)} ${msg}`) } as never;

  beforeEach(() => {
    tmp = makeTemp('fdpool');
    root = path.join(tmp, 'root');
    fs.mkdirSync(path.join(root, 'd'), { recursive: true });
    for (let i = 0; i < 10; i++) fs.writeFileSync(path.join(root, 'd', `f${i}`), `file ${i}`);
    log.length = 0;
    b = new LocalBackend(root, helper, { log: logger, pool: { capacity: 4, pinCap: 2 } });
  });
  afterEach(async () => {
    await b.close();
    rmTemp(tmp);
  });

  it('holds at most its capacity of descriptors, reopens the others on use, and keeps them through renames', async () => {
    const files: BackendFile[] = [];
    for (let i = 0; i < 10; i++) files.push(await b.open(`/d/f${i}`, { write: true }));
    expect(b.descriptors.held).toBe(4);
    expect(fdsInto(root)).toBe(4);
    // written through a descriptor the pool later gives up: the bytes are in the file
    await files[0]?.write(Buffer.from('FILE'), 4, 0);
    for (let i = 1; i < 10; i++) await files[i]?.stat();
    expect(fs.readFileSync(path.join(root, 'd/f0'), 'utf8')).toBe('FILE 0');
    // a directory renamed while its files' descriptors are closed: reopened at the new path
    await b.rename('/d', '/e');
    for (let i = 0; i < 10; i++) expect(await text(files[i] as BackendFile)).toBe(i === 0 ? 'FILE 0' : `file ${i}`);
    await b.rename('/e/f3', '/e/g3');
    for (let i = 0; i < 10; i++) await files[i]?.sync(false);
    expect(await text(files[3] as BackendFile)).toBe('file 3');
    expect(fdsInto(root)).toBeLessThanOrEqual(4);
    // copy_file_range between two files whose descriptors come and go
    if (files[1]?.copyRangeTo) {
      for (let i = 4; i < 10; i++) await files[i]?.stat(); // push 1 and 2 out
      expect(await files[1].copyRangeTo(files[2] as BackendFile, 0, 0, 6)).toBe(6);
      expect(fs.readFileSync(path.join(root, 'e/f2'), 'utf8')).toBe('file 1');
    }
    for (const f of files) await f.close();
    expect(b.descriptors.held).toBe(0);
    expect(fdsInto(root)).toBe(0);
    expect(log).toEqual([]);
  });

  it('pins files unlinked or renamed over while open, up to their share; past it the unlink fails EMFILE and everyone else keeps working', async () => {
    const files: BackendFile[] = [];
    for (let i = 0; i < 6; i++) files.push(await b.open(`/d/f${i}`, { write: false }));
    // two of the six descriptors were given up: an unlink reopens such a file and pins it first
    await b.unlink('/d/f0');
    fs.writeFileSync(path.join(root, 'd/new'), 'replacement');
    await b.rename('/d/new', '/d/f1'); // f1 renamed over while open
    expect(b.descriptors.pinned).toBe(2);
    // the share is full: the next unlink of an open file is refused, and nothing changes
    await expectCode(b.unlink('/d/f2'), 'EMFILE');
    expect(fs.existsSync(path.join(root, 'd/f2'))).toBe(true);
    await expectCode(b.rename('/d/f3', '/d/f2'), 'EMFILE');
    expect(fs.readFileSync(path.join(root, 'd/f3'), 'utf8')).toBe('file 3');
    expect(log.length).toBe(1); // told once, not per refusal
    expect(log[0]).toMatch(/out of file descriptors/);
    // every open file still reads its own bytes: the pinned ones, and the rest by turns
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 6; i++) expect(await text(files[i] as BackendFile)).toBe(`file ${i}`);
    }
    // a file that is not open is removed as ever
    await b.unlink('/d/f9');
    // closing a pinned file frees its place
    await files[0]?.close();
    await b.unlink('/d/f2');
    expect(b.descriptors.pinned).toBe(2);
    expect(await text(files[2] as BackendFile)).toBe('file 2');
    for (const f of files.slice(1)) await f.close();
    expect(b.descriptors).toEqual({ held: 0, pinned: 0, capacity: 4 });
  });

  it('a file replaced or removed beside the mount while its descriptor was closed answers ESTALE, never another file', async () => {
    const victims = [await b.open('/d/f0', { write: true }), await b.open('/d/f1', { write: true })];
    const others: BackendFile[] = [];
    for (let i = 2; i < 10; i++) others.push(await b.open(`/d/f${i}`, { write: true }));
    for (const f of others) await f.stat();
    expect(holds(path.join(root, 'd/f0')) || holds(path.join(root, 'd/f1'))).toBe(false);
    // f0: moved away beside the mount; f1: deleted and made again (its inode number may be reused)
    fs.renameSync(path.join(root, 'd/f0'), path.join(root, 'd/moved'));
    fs.unlinkSync(path.join(root, 'd/f1'));
    fs.writeFileSync(path.join(root, 'd/f1'), 'impostor');
    await expectCode(victims[0]?.stat() as Promise<unknown>, 'ESTALE');
    await expectCode((victims[1] as BackendFile).write(Buffer.from('X'), 1, 0), 'ESTALE');
    expect(fs.readFileSync(path.join(root, 'd/f1'), 'utf8')).toBe('impostor');
    // the others are untouched and work
    for (let i = 2; i < 10; i++) expect(await text(others[i - 2] as BackendFile)).toBe(`file ${i}`);
    for (const f of [...victims, ...others]) await f.close();
    expect(b.descriptors.held).toBe(0);
  });
});

describe('open-file limit', () => {
  it('raiseFdLimit lifts the soft limit to the hard one', () => {
    const before = fdLimit();
    expect(before).not.toBeNull();
    const hard = before?.hard as number;
    const lowered = Math.min(hard, 1000);
    // lower this very process's soft limit from outside, then raise it back from inside
    execFileSync('prlimit', ['--pid', String(process.pid), `--nofile=${lowered}:${hard}`]);
    try {
      expect(fdLimit()?.soft).toBe(lowered);
      const raised = raiseFdLimit();
      if ('error' in raised) throw new Error(raised.error);
      expect(raised.soft).toBe(hard);
      if (lowered < hard) expect(raised.raisedFrom).toBe(lowered);
      expect(fdLimit()?.soft).toBe(hard);
    } finally {
      execFileSync('prlimit', ['--pid', String(process.pid), `--nofile=${before?.soft}:${hard}`]);
    }
  });

  it('the pool leaves headroom below the limit and never shrinks to nothing', () => {
    const d = DEFAULTS.local;
    expect(poolSize(null).capacity).toBe(d.backingFdsMax);
    expect(poolSize(1_000_000).capacity).toBe(d.backingFdsMax);
    expect(poolSize(1024).capacity).toBe(1024 - d.fdHeadroom);
    expect(poolSize(200).capacity).toBe(Math.min(d.backingFdsMin, 100));
    expect(poolSize(1024).pinCap).toBe(Math.floor((1024 - d.fdHeadroom) * d.pinnedShare));
  });
});
