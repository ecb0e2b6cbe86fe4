import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../src/config/defaults.js';
import { CLI, onGcs, PUNCHES_HOLES, sh, type TestMount } from '../helpers/mount.js';
import { startJournaledMount, type JournaledMount } from '../helpers/journaled-mount.js';

/**
 * Range before-images (issue 17): a write session into a large file keeps the old bytes of the
 * extents it changes, once per session (an fsync ends nothing of that), holes cost nothing, and
 * rollback puts every byte and the size back. Journal growth is measured as the state
 * directory's bytes (segments and blobs) before and after.
 */

const EXTENT = DEFAULTS.journal.extentBytes;
const MiB = 1 << 20;

function ledgerfs(args: string[], env: NodeJS.ProcessEnv): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 120_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function ok(args: string[], env: NodeJS.ProcessEnv): string {
  const r = ledgerfs(args, env);
  if (r.status !== 0) throw new Error(`ledgerfs ${args.join(' ')} exited ${r.status}\n${r.stderr}\n${r.stdout}`);
  return r.stdout;
}

/** Bytes of every file below `dir` (apparent sizes: what the journal wrote). */
function dirBytes(dir: string): number {
  let n = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) n += dirBytes(p);
    else if (e.isFile()) n += fs.statSync(p).size;
  }
  return n;
}

function sha256(file: string): string {
  const h = crypto.createHash('sha256');
  const fd = fs.openSync(file, 'r');
  try {
    const buf = Buffer.allocUnsafe(4 * MiB);
    for (let pos = 0; ; ) {
      const n = fs.readSync(fd, buf, 0, buf.length, pos);
      if (n === 0) break;
      h.update(buf.subarray(0, n));
      pos += n;
    }
  } finally {
    fs.closeSync(fd);
  }
  return h.digest('hex');
}

/** Run a Python snippet in `cwd` (os.pwrite/fsync/ftruncate as a program would). */
function py(code: string, cwd: string): string {
  return sh(`python3 - <<'PY'\nimport os, random\n${code}\nPY`, cwd);
}

function randomFile(file: string, size: number, seed: number): void {
  const fd = fs.openSync(file, 'w');
  try {
    const chunk = Buffer.allocUnsafe(MiB);
    for (let pos = 0; pos < size; pos += chunk.length) {
      for (let i = 0; i < chunk.length; i += 4) chunk.writeUInt32LE((seed * 2654435761 + pos + i) >>> 0, i);
      fs.writeSync(fd, chunk, 0, Math.min(chunk.length, size - pos), pos);
    }
  } finally {
    fs.closeSync(fd);
  }
}

describe.skipIf(onGcs)('mount: range before-images', () => {
  let j: JournaledMount;
  let m: TestMount;
  let state: string;
  beforeEach(async () => {
    j = await startJournaledMount('ranges', {
      keepSource: true,
      populate: (src) => {
        // 1 GiB, sparse: 1 MiB of data at 0 and 1 MiB at 512 MiB
        const fd = fs.openSync(path.join(src, 'big.img'), 'w');
        randomFile(path.join(src, 'tmp.bin'), 2 * MiB, 7);
        const data = fs.readFileSync(path.join(src, 'tmp.bin'));
        fs.writeSync(fd, data, 0, MiB, 0);
        fs.writeSync(fd, data, MiB, MiB, 512 * MiB);
        fs.ftruncateSync(fd, 1024 * MiB);
        fs.closeSync(fd);
        fs.rmSync(path.join(src, 'tmp.bin'));
        randomFile(path.join(src, 'db.bin'), 4 * MiB, 3);
        randomFile(path.join(src, 'mixed.bin'), 3 * MiB + 12_345, 5);
      },
      args: ['--attr-timeout', '0', '--entry-timeout', '0'],
    });
    ({ m, state } = j);
  }, 120_000);
  afterEach(async () => {
    expect(await j.finish(), 'the daemon logged errors').toEqual([]);
  });

  it('a 4 KiB overwrite in a 1 GiB file keeps one extent; deleting the sparse file keeps its data only; rollback is byte-exact', () => {
    const big = path.join(m.src, 'big.img');
    const before = sha256(big);
    const j0 = dirBytes(state);
    py(`fd = os.open('big.img', os.O_WRONLY)\nos.pwrite(fd, b'x' * 4096, 512 * 1024 * 1024 + 100_000)\nos.close(fd)`, m.mnt);
    const j1 = dirBytes(state);
    expect(j1 - j0).toBeLessThanOrEqual(EXTENT + 4096);
    expect(j1 - j0).toBeGreaterThanOrEqual(EXTENT); // the extent was kept (not nothing)
    // a write into a hole keeps no bytes
    py(`fd = os.open('big.img', os.O_WRONLY)\nos.pwrite(fd, b'y' * 4096, 800 * 1024 * 1024)\nos.close(fd)`, m.mnt);
    const j2 = dirBytes(state);
    expect(j2 - j1).toBeLessThan(4096);
    const show = ok(['show', '--state', state, '--json', String(lastSeq(state, m.env))], m.env);
    expect(show).toContain('"kind": "range"');
    sh('rm big.img', m.mnt);
    const j3 = dirBytes(state);
    expect(j3 - j2).toBeLessThanOrEqual(2 * MiB + 64 * 1024);
    ok(['rollback', '--state', state, '--session', 'ranges'], m.env);
    expect(sha256(big)).toBe(before);
    expect(fs.statSync(big).size).toBe(1024 * MiB);
    // holes came back as holes: about the 2 MiB of data are allocated, not 1 GiB
    expect(fs.statSync(big).blocks * 512).toBeLessThan(16 * MiB);
    expect(ok(['verify', '--state', state], m.env)).toMatch(/^clean$/m);
  }, 300_000);

  it('100 x (4 KiB write + fsync) into a 4 MiB file: each extent kept once across the fsyncs; rollback exact', () => {
    const db = path.join(m.src, 'db.bin');
    const before = sha256(db);
    const j0 = dirBytes(state);
    py(
      `random.seed(1)\nfd = os.open('db.bin', os.O_RDWR)\nfor i in range(100):\n  os.pwrite(fd, os.urandom(4096), random.randrange(0, 1024) * 4096)\n  os.fsync(fd)\nos.close(fd)`,
      m.mnt,
    );
    const grown = dirBytes(state) - j0;
    expect(grown).toBeLessThanOrEqual(4 * MiB);
    // every extent of the file was touched: each kept exactly once, not once per fsync
    const rec = ok(['show', '--state', state, '--json', String(lastSeq(state, m.env))], m.env);
    const ranges = (JSON.parse(rec) as { records: { kind: string; offset?: number }[] }).records.filter((r) => r.kind === 'range');
    expect(new Set(ranges.map((r) => r.offset)).size).toBe(ranges.length);
    expect(ranges.length).toBeLessThanOrEqual((4 * MiB) / EXTENT);
    ok(['rollback', '--state', state, '--session', 'ranges'], m.env);
    expect(sha256(db)).toBe(before);
  }, 300_000);

  // (punch-hole: fallocate's modes are not served by fuse-native)
  it.skipIf(!PUNCHES_HOLES)('overwrites, ftruncate, punch-hole, copy_file_range and appends in one session: show and verify name the ranges; rollback exact', () => {
    const f = path.join(m.src, 'mixed.bin');
    const before = sha256(f);
    const sizeBefore = fs.statSync(f).size;
    py(
      [
        "fd = os.open('mixed.bin', os.O_RDWR)",
        'os.pwrite(fd, b"a" * 10, 5)',
        'os.pwrite(fd, b"b" * 300000, 1000000)',
        'os.fsync(fd)',
        'os.pwrite(fd, b"c" * 4096, 2 * 1024 * 1024 + 7)',
        'os.ftruncate(fd, 1500000)',
        'os.pwrite(fd, b"d" * 50000, 2900000)', // regrows past the cut: the hole between must come back as old data
        'os.pwrite(fd, b"e" * 100000, os.fstat(fd).st_size)',
        "src = os.open('db.bin', os.O_RDONLY)",
        'os.copy_file_range(src, fd, 200000, 0, 600000)',
        'os.close(src)',
        'os.close(fd)',
      ].join('\n'),
      m.mnt,
    );
    sh('fallocate -p -o 300000 -l 400000 mixed.bin', m.mnt);
    expect(sha256(f)).not.toBe(before);
    const log = JSON.parse(ok(['log', '--state', state, '--json'], m.env)) as { seq: number; op: string; paths: string[] }[];
    const seqs = log.filter((e) => e.paths[0] === '/mixed.bin' && e.op === 'write').map((e) => e.seq);
    expect(seqs.length).toBeGreaterThan(0);
    const shown = ok(['show', '--state', state, String(Math.min(...seqs))], m.env);
    expect(shown).toMatch(/kept +old bytes of \d+ range\(s\)/);
    expect(shown).toMatch(new RegExp(`range +\\[0, ${EXTENT}\\) ${EXTENT} bytes: blob [0-9a-f]{12}`));
    expect(ok(['verify', '--state', state], m.env)).toMatch(/^clean$/m);
    ok(['rollback', '--state', state, '--session', 'ranges'], m.env);
    expect(fs.statSync(f).size).toBe(sizeBefore);
    expect(sha256(f)).toBe(before);
  }, 300_000);

  it.skipIf(!PUNCHES_HOLES)('a write into a hole is undone by punching the hole again: bytes exact, the file stays sparse', () => {
    const f = path.join(m.src, 'holey.bin');
    randomFile(f, 16 * EXTENT, 9);
    sh(`fallocate -p -o ${4 * EXTENT} -l ${8 * EXTENT} holey.bin`, m.mnt);
    const before = sha256(f);
    const blocks = fs.statSync(f).blocks;
    const first = lastSeq(state, m.env);
    py(`fd = os.open('holey.bin', os.O_WRONLY)\nos.pwrite(fd, b'q' * 3 * ${EXTENT}, ${5 * EXTENT + 100})\nos.pwrite(fd, b'r' * 10, 7)\nos.close(fd)`, m.mnt);
    const rec = JSON.parse(ok(['show', '--state', state, '--json', String(lastSeq(state, m.env))], m.env)) as { records: { kind: string; blob?: string; offset?: number; length?: number }[] };
    // the extents the write reached in the hole are kept as holes, no bytes; the one at 0 as data
    const ranges = rec.records.filter((r) => r.kind === 'range');
    const holes = ranges.filter((r) => r.blob === undefined);
    expect(Math.min(...holes.map((r) => r.offset as number))).toBe(5 * EXTENT);
    expect(holes.reduce((n, r) => n + (r.length as number), 0)).toBe(4 * EXTENT);
    expect(ranges.filter((r) => r.blob !== undefined).map((r) => [r.offset, r.length])).toEqual([[0, EXTENT]]);
    expect(sha256(f)).not.toBe(before);
    ok(['rollback', '--state', state, '--to', String(first)], m.env);
    expect(sha256(f)).toBe(before);
    expect(fs.statSync(f).blocks).toBe(blocks);
  }, 300_000);

  it('an fsync records the state without re-reading the file; writing again resumes the session; the last close hashes it', () => {
    py(`fd = os.open('mixed.bin', os.O_RDWR)\nfor i in range(3):\n  os.pwrite(fd, b'w' * 100, i * 100000)\n  os.fsync(fd)\nos.close(fd)`, m.mnt);
    const rec = JSON.parse(ok(['show', '--state', state, '--json', String(lastSeq(state, m.env))], m.env)) as {
      status: string; records: { kind: string; reason?: string; after?: { sha256?: string }[] }[];
    };
    const kinds = rec.records.map((r) => (r.kind === 'end' ? `end:${r.reason}${r.after?.[0]?.sha256 ? '+sha' : ''}` : r.kind));
    expect(kinds.filter((k) => k !== 'range')).toEqual(['op', 'end:fsync', 'resume', 'end:fsync', 'resume', 'end:fsync', 'end:close+sha']);
    expect(rec.status).toBe('done');
  }, 300_000);

  it('verify names a damaged range blob, and rollback refuses before changing anything', () => {
    py(`fd = os.open('db.bin', os.O_WRONLY)\nos.pwrite(fd, b'z' * 10, 3 * 1024 * 1024)\nos.close(fd)`, m.mnt);
    const changed = sha256(path.join(m.src, 'db.bin'));
    const rec = JSON.parse(ok(['show', '--state', state, '--json', String(lastSeq(state, m.env))], m.env)) as { records: { kind: string; blob?: string }[] };
    const blob = rec.records.find((r) => r.kind === 'range')?.blob as string;
    expect(blob).toMatch(/^[0-9a-f]{64}$/);
    const file = path.join(state, 'blobs', blob.slice(0, 2), blob.slice(2));
    const bytes = fs.readFileSync(file);
    bytes[1000] = (bytes[1000] as number) ^ 0xff;
    fs.chmodSync(file, 0o600);
    fs.writeFileSync(file, bytes);
    const v = ledgerfs(['verify', '--state', state], m.env);
    expect(v.status).toBe(1);
    expect(v.stdout + v.stderr).toMatch(new RegExp(`before-image of /db.bin \\[3145728, \\+${EXTENT}\\): blob ${blob} does not match its hash`));
    const r = ledgerfs(['rollback', '--state', state, '--session', 'ranges'], m.env);
    expect(r.status).not.toBe(0);
    expect(r.stdout + r.stderr).toMatch(/Rollback refused, nothing was changed/);
    expect(sha256(path.join(m.src, 'db.bin'))).toBe(changed);
  }, 300_000);
});

function lastSeq(state: string, env: NodeJS.ProcessEnv): number {
  const log = JSON.parse(ok(['log', '--state', state, '--json'], env)) as { seq: number }[];
  return log[0]?.seq ?? 0;
}
