import crypto from 'node:crypto';
import { type Attr, type Backend, type BackendFile, VfsError } from '../core/index.js';
import type { NodeState, State } from './record.js';

/**
 * Restored times may lose precision on the way back (the local backend keeps nanoseconds; object
 * stores keep milliseconds), so "the same mtime" means within this.
 * An edit beside the mount within a millisecond of the journaled one is not told apart.
 */
export const MTIME_SLACK_NS = 1_000_000n;

export function stateFromAttr(a: Attr, target?: string): NodeState {
  const s: NodeState = {
    type: a.type,
    mode: a.mode & 0o7777,
    uid: a.uid,
    gid: a.gid,
    size: a.size,
    mtimeNs: a.mtimeNs.toString(),
    ino: a.ino,
    nlink: a.nlink,
  };
  if (target !== undefined) s.target = target;
  if (a.rdev !== undefined && (a.type === 'chardev' || a.type === 'blockdev')) s.rdev = a.rdev;
  return s;
}

/**
 * What is at `path` now: a state, or null when nothing is (ENOENT, or a parent is not a directory).
 * `sameTarget`: a state read before of this path; a symlink still of its inode keeps its target
 * (a link's text cannot change in place), so the link is not read again. Reading it would bump its
 * atime (relatime on the backend's disk, atime older than mtime) just after a utimens set it.
 * `known`: the node's attributes as the change that just made them answered (no stat then).
 * `seen`: given the attributes the state was made from (what a reply can use without a stat).
 */
export async function stateOf(backend: Backend, path: string, opts: { atime?: boolean; sameTarget?: State; known?: Attr } = {}, seen?: { attr?: Attr }): Promise<State> {
  let a: Attr | null;
  if (opts.known) {
    a = opts.known;
  } else if (backend.tryStat) {
    a = await backend.tryStat(path);
    if (!a) return null;
  } else {
    try {
      a = await backend.stat(path);
    } catch (err) {
      if (err instanceof VfsError && (err.code === 'ENOENT' || err.code === 'ENOTDIR')) return null;
      throw err;
    }
  }
  let target: string | undefined;
  if (a.type === 'symlink') {
    const was = opts.sameTarget;
    target = was?.type === 'symlink' && was.ino === a.ino && was.target !== undefined ? was.target : await backend.readlink(path);
  }
  const s = stateFromAttr(a, target);
  if (opts.atime) s.atimeNs = a.atimeNs.toString();
  if (seen) seen.attr = a;
  return s;
}

/** Which parts of a node an undo relies on being as the journal left them. */
export type Aspect = 'kind' | 'content' | 'mode' | 'owner' | 'mtime';

function sameTime(a: string, b: string): boolean {
  const d = BigInt(a) - BigInt(b);
  return (d < 0n ? -d : d) <= MTIME_SLACK_NS;
}

export function describeState(s: State): string {
  if (!s) return 'nothing';
  if (s.type === 'dir') return `a directory (mode ${s.mode.toString(8)})`;
  if (s.type === 'symlink') return `a symlink to ${JSON.stringify(s.target ?? '')}`;
  return `a file of ${s.size} bytes (mode ${s.mode.toString(8)}, mtime ${new Date(Number(BigInt(s.mtimeNs) / 1_000_000n)).toISOString()})`;
}

/**
 * Why `actual` is not what the journal expects (`expected`) in the given aspects, or null if it
 * is. Existence and type are always compared.
 */
export function mismatch(expected: State, actual: State, aspects: readonly Aspect[]): string | null {
  if (expected === null || actual === null) {
    return expected === actual ? null : `expected ${describeState(expected)}, found ${describeState(actual)}`;
  }
  const found = () => `expected ${describeState(expected)}, found ${describeState(actual)}`;
  if (expected.type !== actual.type) return found();
  for (const a of aspects) {
    switch (a) {
      case 'kind':
        break;
      case 'content':
        if (expected.type === 'symlink' && expected.target !== actual.target) return found();
        if (expected.type === 'file' && (expected.size !== actual.size || !sameTime(expected.mtimeNs, actual.mtimeNs))) {
          return `${found()}: its content changed since`;
        }
        break;
      case 'mtime':
        if (expected.type !== 'dir' && !sameTime(expected.mtimeNs, actual.mtimeNs)) return `${found()}: its times changed since`;
        break;
      case 'mode':
        if (expected.mode !== actual.mode) return `expected mode ${expected.mode.toString(8)}, found ${actual.mode.toString(8)}`;
        break;
      case 'owner':
        if (expected.uid !== actual.uid || expected.gid !== actual.gid) {
          return `expected owner ${expected.uid}:${expected.gid}, found ${actual.uid}:${actual.gid}`;
        }
        break;
    }
  }
  return null;
}

const EMPTY_SHA256 = crypto.createHash('sha256').digest('hex');

/** sha256 of the first `size` bytes of an open file (null if it is shorter now). */
export async function hashOpenFile(file: BackendFile, size: number): Promise<string | null> {
  if (size === 0) return EMPTY_SHA256;
  const h = crypto.createHash('sha256');
  const buf = Buffer.allocUnsafe(Math.min(size, 1 << 20));
  for (let off = 0; off < size; ) {
    const n = await file.read(buf, Math.min(buf.length, size - off), off);
    if (n <= 0) return null;
    h.update(buf.subarray(0, n));
    off += n;
  }
  return h.digest('hex');
}

/** sha256 of the file at `path` now, if it is a file of `size` bytes. */
export async function hashAt(backend: Backend, path: string, size: number): Promise<string | null> {
  if (size === 0) return EMPTY_SHA256;
  const f = await backend.open(path, { write: false });
  try {
    return await hashOpenFile(f, size);
  } finally {
    await f.close();
  }
}
