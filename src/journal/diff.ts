import { type Backend, isWithin, rebase } from '../core/index.js';
import type { BlobStore } from './blobs.js';
import type { Operation } from './history.js';
import { mismatch, stateOf } from './node-state.js';
import type { NodeState, State } from './record.js';
import { unifiedDiff } from './text-diff.js';

export type ChangeKind = 'added' | 'modified' | 'deleted' | 'renamed';

export interface Change {
  kind: ChangeKind;
  /** where the node is at the end of the range (deleted: where it was) */
  path: string;
  /** renamed: where it was at the start of the range */
  from?: string;
  type: NodeState['type'];
  before: State;
  after: State;
  /** what changed, in words: "content 120 -> 340 bytes", "mode 644 -> 600" */
  details: string[];
  /** unified diff of a text file, when the journal (or the workspace) holds both sides */
  diff?: string;
}

interface Node {
  origin: string | null;
  start: State;
  end: State;
  path: string | null;
  /** moved only because a directory above it was renamed */
  movedWithParent: boolean;
  /** ops that touched it, in order */
  ops: Operation[];
}

/** Text files up to this size get a unified diff. */
const MAX_DIFF_BYTES = 1 << 20;

/**
 * The net effect of `ops` (in seq order) per node: nodes created and removed within the range
 * vanish, renames collapse to from -> to, and several writes to one file are one modification.
 */
export function netChanges(ops: Operation[]): { changes: Change[]; nodes: Node[] } {
  const nodes: Node[] = [];
  const at = new Map<string, Node>();
  const nodeAt = (path: string, before: State, op: Operation): Node => {
    let n = at.get(path);
    if (!n) {
      n = { origin: before ? path : null, start: before, end: before, path, movedWithParent: false, ops: [] };
      nodes.push(n);
      at.set(path, n);
    }
    if (n.ops[n.ops.length - 1] !== op) n.ops.push(op);
    return n;
  };
  for (const op of ops) {
    if (op.status === 'failed') continue;
    const after = op.after ?? op.before;
    const [p0, p1] = op.paths as [string, string | undefined];
    switch (op.op) {
      case 'unlink':
      case 'rmdir': {
        const n = nodeAt(p0, op.before[0] ?? null, op);
        n.end = null;
        n.path = null;
        at.delete(p0);
        break;
      }
      case 'rename': {
        if ((after[0] ?? null) !== null) break; // both names were one node: nothing moved
        const moving = nodeAt(p0, op.before[0] ?? null, op);
        if ((op.before[1] ?? null) !== null || at.has(p1 as string)) {
          const replaced = nodeAt(p1 as string, op.before[1] ?? null, op);
          replaced.end = null;
          replaced.path = null;
        }
        at.delete(p0);
        at.delete(p1 as string);
        // tracked nodes below a renamed directory move with it
        for (const [p, n] of [...at]) {
          if (isWithin(p, p0)) {
            at.delete(p);
            n.path = rebase(p, p0, p1 as string);
            n.movedWithParent = true;
            at.set(n.path, n);
          }
        }
        moving.path = p1 as string;
        moving.end = after[1] ?? null;
        at.set(p1 as string, moving);
        break;
      }
      default: {
        const n = nodeAt(p0, op.before[0] ?? null, op);
        n.end = after[0] ?? null;
        n.path = p0;
      }
    }
  }
  const changes: Change[] = [];
  for (const n of nodes) {
    const s = n.start;
    const e = n.end;
    if (!s && !e) continue;
    const type = (e ?? s)?.type ?? 'file';
    const details = describeDifference(s, e);
    if (!s && e) changes.push({ kind: 'added', path: n.path as string, type, before: s, after: e, details });
    else if (s && !e) changes.push({ kind: 'deleted', path: n.origin as string, type, before: s, after: e, details });
    else if (n.origin !== n.path) {
      if (n.movedWithParent) {
        if (details.length > 0) changes.push({ kind: 'modified', path: n.path as string, type, before: s, after: e, details });
      } else {
        changes.push({ kind: 'renamed', path: n.path as string, from: n.origin as string, type, before: s, after: e, details });
      }
    } else if (details.length > 0) {
      changes.push({ kind: 'modified', path: n.path as string, type, before: s, after: e, details });
    }
  }
  return { changes: mergeReplacements(changes), nodes };
}

/**
 * A path that lost its node and got a new one (an editor's or `sed -i`'s write-to-temp and
 * rename-over) is one modification of that path, not a deletion plus an addition.
 */
function mergeReplacements(changes: Change[]): Change[] {
  const deleted = new Map<string, Change>();
  for (const c of changes) if (c.kind === 'deleted') deleted.set(c.path, c);
  const out: Change[] = [];
  const merged = new Set<Change>();
  for (const c of changes) {
    const gone = c.kind === 'added' ? deleted.get(c.path) : undefined;
    if (gone && c.after && gone.before) {
      merged.add(gone);
      out.push({ kind: 'modified', path: c.path, type: c.after.type, before: gone.before, after: c.after, details: describeDifference(gone.before, c.after) });
    } else if (c.kind !== 'deleted') out.push(c);
  }
  for (const c of deleted.values()) if (!merged.has(c)) out.push(c);
  out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return out;
}

function describeDifference(s: State, e: State): string[] {
  const d: string[] = [];
  if (!s || !e) {
    const x = (e ?? s) as NonNullable<State>;
    if (x.type === 'file') d.push(`${x.size} bytes`);
    if (x.type === 'symlink') d.push(`-> ${x.target}`);
    return d;
  }
  if (s.type !== e.type) d.push(`${s.type} -> ${e.type}`);
  if (s.type === 'file' && e.type === 'file') {
    if (s.size !== e.size) d.push(`content ${s.size} -> ${e.size} bytes`);
    else if (s.mtimeNs !== e.mtimeNs) d.push(`content (${e.size} bytes) rewritten`);
  }
  if (s.type === 'symlink' && s.target !== e.target) d.push(`target ${s.target} -> ${e.target}`);
  if (s.mode !== e.mode) d.push(`mode ${s.mode.toString(8)} -> ${e.mode.toString(8)}`);
  if (s.uid !== e.uid || s.gid !== e.gid) d.push(`owner ${s.uid}:${s.gid} -> ${e.uid}:${e.gid}`);
  return d;
}

function isText(b: Buffer): boolean {
  if (b.length > MAX_DIFF_BYTES || b.includes(0)) return false;
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(b);
    return true;
  } catch {
    return false;
  }
}

async function readBackendFile(backend: Backend, path: string, size: number): Promise<Buffer> {
  const f = await backend.open(path, { write: false });
  try {
    const buf = Buffer.alloc(size);
    let off = 0;
    while (off < size) {
      const n = await f.read(buf.subarray(off), size - off, off);
      if (n === 0) break;
      off += n;
    }
    return buf.subarray(0, off);
  } finally {
    await f.close();
  }
}

export interface ContentSources {
  blobs: BlobStore;
  /** the workspace now (for the after side of files nothing changed since) */
  backend?: Backend;
  /** operations after the range (their before-images are the after side of the range) */
  later: Operation[];
}

/** Fill in unified diffs for text files whose both sides can be found. */
export async function addTextDiffs(changes: Change[], nodes: Node[], src: ContentSources): Promise<void> {
  const byPath = new Map<string, Node>();
  for (const n of nodes) if (n.path) byPath.set(n.path, n);
  for (const c of changes) {
    if (c.type !== 'file') continue;
    const node = c.kind === 'deleted' ? nodes.find((n) => n.origin === c.path && n.end === null) : byPath.get(c.path);
    // a replaced path: the old side is the node that was there at the start
    const startNode = c.kind === 'modified' && node && node.origin !== c.path ? nodes.find((n) => n.origin === c.path) ?? node : node;
    if (!node) continue;
    const after = await afterContent(c, src);
    const before = await beforeContent(c, startNode ?? node, after, src);
    if (!before || !after || !isText(before) || !isText(after)) continue;
    const d = unifiedDiff(before.toString('utf8'), after.toString('utf8'), c.kind === 'added' ? '/dev/null' : `a${c.from ?? c.path}`, c.kind === 'deleted' ? '/dev/null' : `b${c.path}`);
    if (d) c.diff = d;
  }
}

async function afterContent(c: Change, src: ContentSources): Promise<Buffer | null> {
  const e = c.after;
  if (!e) return Buffer.alloc(0);
  if (e.type !== 'file') return null;
  if (e.size === 0) return Buffer.alloc(0);
  for (const op of src.later) {
    const i = op.paths.indexOf(c.path);
    if (i < 0) continue;
    const b = op.before[i];
    const blob = b?.blob ?? (op.op === 'write' && i === 0 ? op.capture?.blob : undefined);
    if (b && blob && b.size === e.size) return src.blobs.read(blob);
    break; // the next change to it kept no image: not recoverable from the journal
  }
  if (!src.backend) return null;
  try {
    const now = await stateOf(src.backend, c.path);
    if (mismatch(e, now, ['content']) !== null) return null;
    return await readBackendFile(src.backend, c.path, e.size);
  } catch {
    return null;
  }
}

async function beforeContent(c: Change, node: Node, after: Buffer | null, src: ContentSources): Promise<Buffer | null> {
  const s = c.before;
  if (!s) return Buffer.alloc(0);
  if (s.type !== 'file') return null;
  if (s.size === 0) return Buffer.alloc(0);
  if (s.blob) return src.blobs.read(s.blob);
  // Sessions without a before-image only appended, and metadata changes keep the content: the
  // start is a prefix of the first before-image that follows, or of the end content.
  for (const op of node.ops) {
    // kept by extents (a large file): the start is not a prefix of anything kept whole
    if (op.ranges || op.before.some((b) => b?.ranges)) return null;
    if (op.op === 'write' && op.capture) return src.blobs.read(op.capture.blob).subarray(0, s.size);
    const i = op.paths.findIndex((p, j) => (op.before[j] ?? null) !== null && op.before[j]?.ino === s.ino && p !== undefined);
    const blob = i >= 0 ? op.before[i]?.blob : undefined;
    if (blob) return src.blobs.read(blob).subarray(0, s.size);
  }
  if (after && after.length >= s.size) return after.subarray(0, s.size);
  return null;
}
