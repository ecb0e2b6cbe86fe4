import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../src/config/defaults.js';
import { onGcs, PUNCHES_HOLES, startMount, type TestMount } from '../helpers/mount.js';

/*
 * Reference-model property test: random sequences of file operations are applied, through the
 * same Node fs calls, to a ledgerfs mount and to a plain directory; every op must give the same
 * outcome (ok, or the same errno) and the final trees must be identical (paths, types, sizes,
 * bytes, modes, link counts, symlink targets).
 *
 * The vitest worker calls fs directly on the mount: that is safe because the daemon serving it is
 * another process (startMount spawns `ledgerfs mount`); only a daemon calling synchronously into
 * its own mount would deadlock.
 *
 * Seeded (LEDGERFS_MODEL_SEED to replay), bounded: runs × up to 40 ops. On a failure fast-check
 * shrinks the sequence and the error lists it op by op with both outcomes.
 */

const SEED = Number(process.env.LEDGERFS_MODEL_SEED ?? 20251122);
const RUNS = Number(process.env.LEDGERFS_MODEL_RUNS ?? 30);

type Op =
  | { op: 'writeFile'; p: string; data: string }
  | { op: 'appendFile'; p: string; data: string }
  | { op: 'pwrite'; p: string; offset: number; data: string }
  | { op: 'truncate'; p: string; len: number }
  | { op: 'mkdir'; p: string }
  | { op: 'rmdir'; p: string }
  | { op: 'unlink'; p: string }
  | { op: 'rename'; p: string; to: string }
  | { op: 'symlink'; target: string; p: string }
  | { op: 'link'; p: string; to: string }
  | { op: 'chmod'; p: string; mode: number }
  | { op: 'read'; p: string }
  | { op: 'stat'; p: string }
  // descriptors kept open across later ops (the open-file state must follow renames and unlinks)
  | { op: 'open'; p: string; flags: 'r' | 'r+' | 'a' | 'w+' }
  | { op: 'fdwrite'; fd: number; offset: number; data: string }
  | { op: 'fdread'; fd: number }
  | { op: 'fstat'; fd: number }
  | { op: 'ftruncate'; fd: number; len: number }
  | { op: 'close'; fd: number }
  // large files (range before-images): in-place changes across several journal extents
  | { op: 'bigwrite'; fd: number; offset: number; length: number; seed: number }
  | { op: 'fdsync'; fd: number }
  | { op: 'bigtruncate'; fd: number; len: number }
  | { op: 'punch'; p: string; offset: number; length: number };

// A small alphabet so that names collide: files, dirs and links fight over the same paths.
const NAMES = ['a', 'b', 'c', 'd'];
const pathArb = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...NAMES) },
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom(...NAMES), fc.constantFrom(...NAMES)).map(([x, y]) => `${x}/${y}`) },
);
const dataArb = fc.string({ unit: fc.constantFrom('x', 'y', 'z', '\n', '\u00e9'), maxLength: 24 });
 /** files reach several journal extents (the journal keeps large files by extents) */
const EXTENT = DEFAULTS.journal.extentBytes;
const BIG = 4 * EXTENT + 777;
const modeArb = fc.constantFrom(0o644, 0o600, 0o755, 0o700, 0o444, 0o777, 0o640, 0o4755);

/** Symlink targets stay inside the root: relative, and `../` only from a subdirectory. */
function symlinkArb(): fc.Arbitrary<Op> {
  return fc
    .tuple(pathArb, fc.oneof(pathArb, fc.constantFrom('nowhere', '.', 'a/nowhere')))
    .map(([p, t]) => ({ op: 'symlink' as const, p, target: p.includes('/') && t !== '.' ? `../${t}` : t }));
}

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ op: fc.constant('writeFile' as const), p: pathArb, data: dataArb }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('appendFile' as const), p: pathArb, data: dataArb }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('pwrite' as const), p: pathArb, offset: fc.nat(40), data: dataArb }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('truncate' as const), p: pathArb, len: fc.nat(48) }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('mkdir' as const), p: pathArb }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('rmdir' as const), p: pathArb }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('unlink' as const), p: pathArb }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('rename' as const), p: pathArb, to: pathArb }) },
  { weight: 2, arbitrary: symlinkArb() },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('link' as const), p: pathArb, to: pathArb }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('chmod' as const), p: pathArb, mode: modeArb }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('read' as const), p: pathArb }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('stat' as const), p: pathArb }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('open' as const), p: pathArb, flags: fc.constantFrom('r' as const, 'r+' as const, 'a' as const, 'w+' as const) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('fdwrite' as const), fd: fc.nat(3), offset: fc.nat(40), data: dataArb }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('fdread' as const), fd: fc.nat(3) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('fstat' as const), fd: fc.nat(3) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('ftruncate' as const), fd: fc.nat(3), len: fc.nat(48) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('close' as const), fd: fc.nat(3) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('bigwrite' as const), fd: fc.nat(3), offset: fc.nat(BIG), length: fc.integer({ min: 1, max: 2 * EXTENT }), seed: fc.nat(255) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('fdsync' as const), fd: fc.nat(3) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('bigtruncate' as const), fd: fc.nat(3), len: fc.nat(BIG) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('punch' as const), p: pathArb, offset: fc.nat(BIG), length: fc.integer({ min: 1, max: 2 * EXTENT }) }) },
);

/** bytes `seed` names (the same on both sides) */
function pattern(length: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(length);
  for (let i = 0; i < length; i++) b[i] = (seed + i * 31 + (i >> 9)) & 0xff;
  return b;
}

/** Descriptors a sequence holds open on one side; ops name them by index (modulo the count). */
type Fds = number[];
function pick(fds: Fds, i: number): number | undefined {
  return fds.length === 0 ? undefined : fds[i % fds.length];
}

/** Apply one op under `root`; the outcome is 'ok', 'ok <value>' for reads, or the error code. */
function apply(root: string, o: Op, fds: Fds): string {
  const at = (p: string) => path.join(root, p);
  try {
    switch (o.op) {
      case 'open': fds.push(fs.openSync(at(o.p), o.flags)); break;
      case 'fdwrite': case 'fdread': case 'fstat': case 'ftruncate': case 'close': case 'bigwrite': case 'fdsync': case 'bigtruncate': {
        const fd = pick(fds, o.fd);
        if (fd === undefined) return 'no descriptor';
        if (o.op === 'bigwrite') return `ok ${fs.writeSync(fd, pattern(o.length, o.seed), 0, o.length, o.offset)}`;
        if (o.op === 'fdsync') {
          fs.fsyncSync(fd);
          return 'ok';
        }
        if (o.op === 'bigtruncate') {
          fs.ftruncateSync(fd, o.len);
          return 'ok';
        }
        if (o.op === 'fdwrite') {
          const b = Buffer.from(o.data);
          return `ok ${fs.writeSync(fd, b, 0, b.length, o.offset)}`;
        }
        if (o.op === 'fdread') {
          const b = Buffer.alloc(128);
          const n = fs.readSync(fd, b, 0, 128, 0);
          return `ok ${JSON.stringify(b.subarray(0, n).toString('latin1'))}`;
        }
        if (o.op === 'fstat') {
          const st = fs.fstatSync(fd);
          return `ok size=${st.size} nlink=${st.nlink} mode=${(st.mode & 0o7777).toString(8)}`;
        }
        if (o.op === 'ftruncate') fs.ftruncateSync(fd, o.len);
        else {
          fds.splice(fds.indexOf(fd), 1);
          fs.closeSync(fd);
        }
        break;
      }
      case 'writeFile': fs.writeFileSync(at(o.p), o.data); break;
      case 'appendFile': fs.appendFileSync(at(o.p), o.data); break;
      case 'pwrite': {
        const fd = fs.openSync(at(o.p), 'r+');
        try {
          const b = Buffer.from(o.data);
          fs.writeSync(fd, b, 0, b.length, o.offset);
        } finally {
          fs.closeSync(fd);
        }
        break;
      }
      case 'truncate': fs.truncateSync(at(o.p), o.len); break;
      case 'punch': {
        const r = spawnSync('fallocate', ['-p', '-o', String(o.offset), '-l', String(o.length), at(o.p)], { encoding: 'utf8' });
        // fallocate(1) says why in words: the errno's name is what both sides must agree on
        if (r.status !== 0) return `fallocate failed: ${r.stderr.trim().split(': ').pop()}`;
        break;
      }
      case 'mkdir': fs.mkdirSync(at(o.p)); break;
      case 'rmdir': fs.rmdirSync(at(o.p)); break;
      case 'unlink': fs.unlinkSync(at(o.p)); break;
      case 'rename': fs.renameSync(at(o.p), at(o.to)); break;
      case 'symlink': fs.symlinkSync(o.target, at(o.p)); break;
      case 'link': fs.linkSync(at(o.p), at(o.to)); break;
      case 'chmod': fs.chmodSync(at(o.p), o.mode); break;
      case 'read': return `ok ${JSON.stringify(fs.readFileSync(at(o.p), 'latin1'))}`;
      case 'stat': {
        const st = fs.statSync(at(o.p));
        const type = st.isDirectory() ? 'dir' : 'file';
        return `ok ${type} mode=${(st.mode & 0o7777).toString(8)}${type === 'file' ? ` size=${st.size} nlink=${st.nlink}` : ''}`;
      }
    }
    return 'ok';
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (!code) throw err;
    return code;
  }
}

/** Everything observable about a tree, one line per node, without following symlinks. */
function tree(root: string): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const name of fs.readdirSync(path.join(root, rel)).sort()) {
      const p = rel ? `${rel}/${name}` : name;
      const full = path.join(root, p);
      const st = fs.lstatSync(full);
      const mode = (st.mode & 0o7777).toString(8);
      if (st.isSymbolicLink()) out.push(`${p} -> ${fs.readlinkSync(full)}`);
      else if (st.isDirectory()) {
        out.push(`${p}/ mode=${mode}`);
        walk(p);
      } else {
        const data = fs.readFileSync(full);
        // large files by hash (a failure message stays readable), small ones as text
        const content = data.length > 256 ? `sha256 ${crypto.createHash('sha256').update(data).digest('hex').slice(0, 16)}` : JSON.stringify(data.toString('latin1'));
        out.push(`${p} mode=${mode} nlink=${st.nlink} size=${st.size} ${content}`);
      }
    }
  };
  walk('');
  return out;
}

function clear(root: string): void {
  for (const name of fs.readdirSync(root)) fs.rmSync(path.join(root, name), { recursive: true, force: true });
}

function show(o: Op): string {
  const { op, ...args } = o;
  return `${op}(${Object.entries(args).map(([k, v]) => `${k}=${k === 'mode' ? '0o' + (v as number).toString(8) : JSON.stringify(v)}`).join(', ')})`;
}

/** Every sequence starts from this small tree, so that most ops have something to act on. */
const FIXTURE: Op[] = [
  { op: 'mkdir', p: 'a' },
  { op: 'mkdir', p: 'c' },
  { op: 'writeFile', p: 'b', data: 'hello' },
  { op: 'writeFile', p: 'a/a', data: 'xyz' },
  { op: 'symlink', p: 'c/c', target: '../b' },
];

function checkSequence(mnt: string, plain: string, generated: Op[]): void {
  clear(mnt);
  clear(plain);
  const ops = [...FIXTURE, ...generated];
  const log: string[] = [];
  let diverged = -1;
  const plainFds: Fds = [];
  const mntFds: Fds = [];
  ops.forEach((o, i) => {
    const want = apply(plain, o, plainFds);
    const got = apply(mnt, o, mntFds);
    const same = want === got;
    if (!same && diverged < 0) diverged = i;
    log.push(`${String(i + 1).padStart(3)}. ${show(o)}  plain: ${want}${same ? '' : `  ledgerfs: ${got}  <-- differs`}`);
  });
  for (const fd of [...plainFds, ...mntFds]) fs.closeSync(fd);
  const wantTree = tree(plain);
  const gotTree = tree(mnt);
  if (diverged >= 0 || JSON.stringify(wantTree) !== JSON.stringify(gotTree)) {
    const only = (a: string[], b: string[]) => a.filter((x) => !b.includes(x));
    throw new Error(
      `ledgerfs and the plain directory diverged${diverged >= 0 ? ` at op ${diverged + 1}` : ' in the final tree'}\n` +
        `ops:\n${log.join('\n')}\n` +
        `final tree, plain only:\n  ${only(wantTree, gotTree).join('\n  ') || '(none)'}\n` +
        `final tree, ledgerfs only:\n  ${only(gotTree, wantTree).join('\n  ') || '(none)'}`,
    );
  }
}

describe.each([
  // Exact semantics: no kernel caching, every op (hard links included).
  { name: 'attr/entry timeouts 0, all ops', args: ['--attr-timeout', '0', '--entry-timeout', '0'], links: true },
  // Default caching (1 s). Hard links are left out here: libfuse 2's high-level API gives each
  // name its own kernel inode, so the other name's cached nlink/size is stale up to 1 s (tested
  // and documented in test/mount/posix.test.ts).
  { name: 'default timeouts, no hard links', args: [], links: false },
])('reference model: ledgerfs mount vs plain directory ($name)', ({ args, links }) => {
  let m: TestMount;
  let plain: string;
  beforeAll(async () => {
    m = await startMount({ args });
    plain = path.join(m.dir, 'plain');
    fs.mkdirSync(plain);
  });
  afterAll(async () => {
    await m?.stop();
  });

  it(`same outcome for every op and the same final tree (${RUNS} sequences)`, () => {
    // GCS has no hard links (EPERM): the model is compared without them there
    // and punch-hole only where fallocate's modes are served (not fuse-native, not GCS)
    const arb = opArb.filter((o) => (o.op !== 'link' || (links && !onGcs)) && (o.op !== 'punch' || PUNCHES_HOLES));
    fc.assert(
      fc.property(fc.array(arb, { minLength: 1, maxLength: 40, size: 'max' }), (ops) => checkSequence(m.mnt, plain, ops)),
      { seed: SEED + (links ? 0 : 1), numRuns: RUNS, endOnFailure: false },
    );
    expect(m.alive()).toBe(true);
    expect(m.errors()).toEqual([]);
  }, 300_000);
});
