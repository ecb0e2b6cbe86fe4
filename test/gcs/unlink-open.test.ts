import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_BINDING, logsMatching, py, sh, startMount, type TestMount } from '../helpers/mount.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/*
 * native-ll sends the kernel's UNLINK (and a RENAME over a file) as it comes, with no hidden
 * rename: on GCS that deletes the object while handles opened before it still read it. POSIX
 * says they keep reading the old bytes until they close; so must this mount, on native-ll,
 * whichever process unlinks. Files are bigger than a read-ahead window, and the reader is
 * part-way through when the name goes, so the rest must come from somewhere other than the
 * object that is gone.
 */
describe('gcs (native-ll by default): a file unlinked or renamed over while open stays readable through its fd', () => {
  let g: GcsFixture;
  let m: TestMount;
  const SIZE = 5 * 1024 * 1024 + 123;
  const bytes = (seed: string) => {
    const out = Buffer.alloc(SIZE);
    for (let off = 0, i = 0; off < SIZE; off += 32, i++) crypto.createHash('sha256').update(`${seed}${i}`).digest().copy(out, off);
    return out;
  };
  const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex');
  const names = ['unlinked', 'replaced', 'cached', 'twice'];

  beforeAll(async () => {
    g = await startGcsFixture();
    const b = g.storage.bucket(g.bucket);
    for (const n of names) await b.file(`d/${n}`).save(bytes(n), { resumable: false });
    await b.file('d/new').save('the new bytes\n', { resumable: false });
    // no --binding: GCS mounts get the default, native-ll (LEDGERFS_TEST_BINDING picks another)
    m = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket } });
  }, 120_000);
  afterAll(async () => {
    await m?.stop();
    await g?.stop();
  });

  /** Open `name`, read 100 KiB, run `cmd` in another process, read the rest: the old bytes' hash. */
  const readAcross = (name: string, cmd: string) =>
    py(
      `
import hashlib, os, subprocess, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
h = hashlib.sha256(os.read(fd, 100 * 1024))
subprocess.run(['bash', '-c', sys.argv[2]], check=True)
while True:
    b = os.read(fd, 1 << 20)
    if not b: break
    h.update(b)
print(h.hexdigest(), os.fstat(fd).st_size)
os.close(fd)
`,
      `${m.mnt}/d`,
      [name, cmd],
    ).trim();

  it('the mount runs on native-ll, the default binding on GCS too', async () => {
    expect(await logsMatching(m, /"msg":"mounted"/)).toContain(`"binding":"${TEST_BINDING ?? 'native-ll'}"`);
  });

  it('unlink from another process: the open fd reads the old bytes to the end', () => {
    expect(readAcross('unlinked', 'rm unlinked')).toBe(`${sha(bytes('unlinked'))} ${SIZE}`);
    expect(sh('ls', `${m.mnt}/d`)).not.toMatch(/^unlinked$/m);
  });

  it('rename over it from another process: the open fd reads the old bytes, the name the new ones', () => {
    expect(readAcross('replaced', 'cp new new2 && mv new2 replaced')).toBe(`${sha(bytes('replaced'))} ${SIZE}`);
    expect(sh('cat replaced', `${m.mnt}/d`)).toBe('the new bytes\n');
  });

  it('a file read whole before (its bytes in the content cache) is unlinked while open', () => {
    expect(sh('sha256sum < cached', `${m.mnt}/d`).split(' ')[0]).toBe(sha(bytes('cached')));
    expect(readAcross('cached', 'rm cached')).toBe(`${sha(bytes('cached'))} ${SIZE}`);
  });

  it('two fds on the file, one of them writing nothing: both read the old bytes after the unlink', () => {
    const out = py(
      `
import hashlib, os, subprocess
a = os.open('twice', os.O_RDONLY)
b = os.open('twice', os.O_RDWR)
os.read(a, 4096)
subprocess.run(['rm', 'twice'], check=True)
def whole(fd):
    h = hashlib.sha256()
    off = 0
    while True:
        x = os.pread(fd, 1 << 20, off)
        if not x: break
        h.update(x); off += len(x)
    return h.hexdigest()
print(whole(a), whole(b))
os.close(a); os.close(b)
print(sorted(os.listdir('.')))
`,
      `${m.mnt}/d`,
    ).trim();
    const h = sha(bytes('twice'));
    expect(out.split('\n')[0]).toBe(`${h} ${h}`);
    expect(out).not.toMatch(/'twice'/);
  });
});
