import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { py, startMount, type TestMount } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/*
 * An open GCS file's length is kept by its handle (no fstat of the staging file per stat, per
 * close's copy into the spool): every write, truncate and fill must move it exactly as the
 * file's own length moves. The same calls run on a file of the mount and on a plain local file;
 * the lengths fstat and stat report after each call, and the bytes in the bucket after fsync
 * and close, must be the plain file's. The last close's version is waited for by an fsync
 * through a read-only descriptor opened after it (as `sync FILE` does): with --durability
 * journal that version is still in the upload queue, and such an fsync returned at once.
 */
const SCRIPT = `
import os, sys, json
path, exclusive = sys.argv[1], sys.argv[2] == 'new'
flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if exclusive else 0)
fd = os.open(path, flags, 0o644)
sizes = []
def note():
    sizes.append([os.fstat(fd).st_size, os.stat(path).st_size])
note()
os.pwrite(fd, b'M' * 3000, 4000); note()          # inside (or, new: past the end, a hole before)
os.pwrite(fd, b'E' * 100, 12000); note()          # past the end: a hole between
os.ftruncate(fd, 5000); note()                   # the tail cut
os.ftruncate(fd, 20000); note()                  # extended with zeros
os.pwrite(fd, b'T' * 50, 19990); note()           # across the end
os.pwrite(fd, b'x' * 10, 0); note()              # at the start: no change of length
os.fsync(fd); note()
os.ftruncate(fd, 0); note()
os.write(fd, b'after the cut\\n'); note()
os.close(fd)
print(json.dumps(sizes))
`;

describe.each(['bucket', 'journal'])('gcs --durability %s: an open file reports the length its writes and truncates made', (durability) => {
  let g: GcsFixture;
  let m: TestMount;
  let home: string;
  const ORIGINAL = Buffer.alloc(10_000, 'o');

  beforeAll(async () => {
    g = await startGcsFixture('ledgerfs-staged-size');
    home = makeTemp('gcs-staged-size');
    await g.storage.bucket(g.bucket).file('d/old').save(ORIGINAL, { resumable: false });
    m = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args: ['--durability', durability, '--state', path.join(home, 'state')] });
  }, 120_000);
  afterAll(async () => {
    await m?.stop();
    await g?.stop();
    if (home) rmTemp(home);
  });

  it.each([
    ['an object that exists', 'old', 'open'],
    ['a new file (O_EXCL)', 'new', 'new'],
  ])('%s', async (_what, name, how) => {
    const local = path.join(home, `local-${name}`);
    if (how === 'open') fs.writeFileSync(local, ORIGINAL);
    const want = py(SCRIPT, home, [local, how]).trim();
    const got = py(SCRIPT, home, [`${m.mnt}/d/${name}`, how]).trim();
    expect(JSON.parse(got)).toEqual(JSON.parse(want));
    // what the bucket holds once the last close's version landed (journal: fsync waited for it,
    // and the last write came after; reopen with fsync to wait for that one too)
    py(`import os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nos.fsync(fd)\nos.close(fd)`, home, [`${m.mnt}/d/${name}`]);
    const [inBucket] = await g.storage.bucket(g.bucket).file(`d/${name}`).download();
    expect(inBucket.toString("latin1")).toBe(fs.readFileSync(local).toString("latin1"));
    expect(fs.readFileSync(`${m.mnt}/d/${name}`).equals(fs.readFileSync(local))).toBe(true);
  });

  it("an fsync through a read-only descriptor while a writer holds the file open puts the writer's bytes in the bucket", async () => {
    const url = `${g.emulator.url}/storage/v1/b/${g.bucket}/o/${encodeURIComponent('d/open-writer')}?alt=media`;
    const out = py(
      `
import os, sys, urllib.request
w = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
os.write(w, b'written, not closed\\n')
r = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(r)
print(urllib.request.urlopen(sys.argv[2]).read().decode(), end='')
os.close(r)
os.close(w)
`,
      home,
      [`${m.mnt}/d/open-writer`, url],
    );
    expect(out).toBe('written, not closed\n');
  });
});
