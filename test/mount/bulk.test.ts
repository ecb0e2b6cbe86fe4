import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { onGcs, run, sh, startMount, type TestMount } from '../helpers/mount.js';

const UTC = 'export TZ=UTC LC_ALL=C; ';

/** Bigger workloads: tar of thousands of files, sqlite3, a 100 MB file, a sparse 1 GiB file. */
describe('mount: bulk workloads', () => {
  let m: TestMount;
  beforeEach(async () => {
    m = await startMount();
  });
  afterEach(async () => {
    const errors = m.errors();
    await m.stop();
    expect(errors, 'the daemon logged errors').toEqual([]);
  });

  // The archive holds a hard link, which GCS cannot make (EPERM); test/gcs/caches.test.ts and
  // scripts/bench-gcs cover tar -x of thousands of files there.
  it.skipIf(onGcs)('tar -x of 3000 small files matches extraction to a plain directory (content, modes, mtimes)', () => {
    const work = path.join(m.dir, 'work');
    const tree = path.join(work, 'tree');
    for (let d = 0; d < 30; d++) {
      const dir = path.join(tree, `d${d}`, d % 3 === 0 ? 'deeper/still' : '');
      fs.mkdirSync(dir, { recursive: true });
      for (let f = 0; f < 100; f++) {
        const p = path.join(dir, `f${f}.txt`);
        fs.writeFileSync(p, `file ${d}/${f}\n`.repeat((d * 7 + f) % 23));
        if (f % 10 === 0) fs.chmodSync(p, 0o755);
        if (f % 17 === 0) fs.chmodSync(p, 0o600);
      }
    }
    fs.symlinkSync('d1/f1.txt', path.join(tree, 'link'));
    fs.linkSync(path.join(tree, 'd2/f2.txt'), path.join(tree, 'hardlink'));
    // sub-second mtimes, kept by the pax format
    sh(`${UTC}touch -d '2003-04-05 06:07:08.123456789' tree/d4/f4.txt && touch -d '1990-01-01 00:00:00' tree/d5`, work);
    sh('tar --format=posix -cf tree.tar tree', work);
    sh(`mkdir plain && tar -xf ${work}/tree.tar -C plain`, work);
    sh(`tar -xf ${work}/tree.tar`, m.mnt);
    const d = run(`diff -r --no-dereference ${work}/plain/tree tree`, m.mnt);
    expect(d.stdout + d.stderr).toBe('');
    expect(d.status).toBe(0);
    expect(sh('find tree -type f | wc -l', m.mnt).trim()).toBe('3001');
    // modes, types, sizes, link counts and mtimes (to the microsecond) as on the plain directory
    const listing = (dir: string) =>
      sh(`find tree -printf '%p %y %m %s %n %TY-%Tm-%Td %TT\\n' | sed -E 's/([0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6})[0-9]*$/\\1/' | sort`, dir);
    const want = listing(path.join(work, 'plain'));
    expect(listing(m.mnt)).toBe(want);
    expect(want).toContain('tree/d4/f4.txt f 644 ');
    // to the nanosecond: the local backend sets times with utimensat and timespecs
    expect(sh(`${UTC}stat -c %y tree/d4/f4.txt tree/d5`, m.mnt)).toBe('2003-04-05 06:07:08.123456789 +0000\n1990-01-01 00:00:00.000000000 +0000\n');
  });

  for (const mode of ['WAL', 'DELETE']) {
    it(`sqlite3 in ${mode} journal mode: 1000 rows in transactions, integrity_check ok, reopen and count`, () => {
      const batch = (n: number) =>
        `BEGIN; INSERT INTO t(k, v) SELECT ${n} * 100 + x, hex(randomblob(40)) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100) SELECT x FROM c); COMMIT;`;
      const setup = `PRAGMA journal_mode=${mode}; CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER UNIQUE, v TEXT); CREATE INDEX tv ON t(v);`;
      expect(sh(`sqlite3 db.sqlite "${setup}"`, m.mnt).trim()).toBe(mode.toLowerCase());
      // ten transactions from ten separate processes, then a rolled-back one
      for (let i = 0; i < 10; i++) sh(`sqlite3 db.sqlite "${batch(i)}"`, m.mnt);
      sh(`sqlite3 db.sqlite "BEGIN; DELETE FROM t; ROLLBACK;"`, m.mnt);
      // an update that rewrites many pages, inside one transaction
      sh(`sqlite3 db.sqlite "BEGIN; UPDATE t SET v = v || 'x' WHERE k % 3 = 0; COMMIT;"`, m.mnt);
      expect(sh('sqlite3 db.sqlite "PRAGMA integrity_check;"', m.mnt).trim()).toBe('ok');
      expect(sh('sqlite3 db.sqlite "PRAGMA journal_mode; SELECT count(*), count(DISTINCT k), sum(v LIKE \'%x\') FROM t;"', m.mnt).trim())
        .toBe(`${mode.toLowerCase()}\n1000|1000|333`);
      // the database in the backend is the same database
      expect(sh('sqlite3 db.sqlite "PRAGMA integrity_check; SELECT count(*) FROM t;"', m.src).trim()).toBe('ok\n1000');
      const leftovers = fs.readdirSync(m.src).filter((n) => n !== 'db.sqlite');
      expect(leftovers).toEqual([]); // -wal/-shm or -journal are gone after the last close
    });
  }

  it('sqlite3 WAL: a reader in another process sees committed rows while a writer holds the database', () => {
    sh('sqlite3 db.sqlite "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);"', m.mnt);
    // python keeps a write transaction open while sqlite3 (another process) reads
    const out = sh(
      `python3 - <<'EOF'
import sqlite3, subprocess
w = sqlite3.connect('db.sqlite', isolation_level=None)
w.execute('BEGIN IMMEDIATE')
w.execute('INSERT INTO t VALUES (2)')
before = subprocess.run(['sqlite3', 'db.sqlite', 'SELECT count(*) FROM t'], capture_output=True, text=True).stdout.strip()
busy = subprocess.run(['sqlite3', 'db.sqlite', 'INSERT INTO t VALUES (3)'], capture_output=True, text=True)
w.execute('COMMIT')
after = subprocess.run(['sqlite3', 'db.sqlite', 'SELECT count(*) FROM t'], capture_output=True, text=True).stdout.strip()
print(before, 'locked' if 'locked' in busy.stderr else busy.stderr, after)
EOF`,
      m.mnt,
    );
    expect(out.trim()).toBe('1 locked 2');
  });

  it('a 100 MB file keeps its sha256 through cp in and out', () => {
    const big = path.join(m.dir, 'big.bin');
    sh(`dd if=/dev/urandom of=${big} bs=1M count=100 status=none`, m.dir);
    sh(`cp ${big} big.bin && cp big.bin ${m.dir}/back.bin`, m.mnt);
    const sums = sh(`sha256sum ${big} big.bin ${m.src}/big.bin ${m.dir}/back.bin | cut -d' ' -f1 | uniq | wc -l`, m.mnt).trim();
    expect(sums).toBe('1');
    expect(fs.statSync(path.join(m.mnt, 'big.bin')).size).toBe(100 << 20);
  });

  // GCS objects have no holes: the 1 GiB is uploaded as zeros (and the mirror reports no sparse blocks).
  it.skipIf(onGcs)('sparse file: truncate -s 1G then write at the end; size exact, holes read as zeros, little disk used', () => {
    sh('truncate -s 1G sparse && printf END | dd of=sparse bs=1 seek=1073741824 conv=notrunc status=none', m.mnt);
    expect(sh('stat -c %s sparse', m.mnt).trim()).toBe(String(1073741824 + 3));
    expect(sh('tail -c 3 sparse', m.mnt)).toBe('END');
    // a few MiB from the middle and from just before the end are zeros
    expect(run('cmp <(dd if=sparse bs=1M skip=512 count=4 status=none) <(head -c 4M /dev/zero)', m.mnt).status).toBe(0);
    expect(run('cmp <(dd if=sparse bs=1M skip=1023 count=1 status=none) <(head -c 1M /dev/zero)', m.mnt).status).toBe(0);
    const kib = Number(sh('du -k sparse | cut -f1', m.mnt));
    expect(kib).toBeLessThan(1024); // the hole is not allocated (blocks come from the backend)
    expect(fs.statSync(path.join(m.src, 'sparse')).blocks).toBeLessThan(2048);
    // growing and shrinking a sparse file
    sh('truncate -s 2G sparse && truncate -s 10 sparse', m.mnt);
    expect(fs.readFileSync(path.join(m.mnt, 'sparse'))).toEqual(Buffer.alloc(10));
  });
});
