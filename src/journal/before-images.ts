import fs from 'node:fs';
import { type BlobStore, hashFile } from './blobs.js';
import type { Operation } from './history.js';
import { keptByBackend, type State } from './record.js';

/** A before-image a rollback needs, and why it cannot be used. */
export interface DamagedImage {
  seq: number;
  path: string;
  blob: string;
  reason: string;
}

interface Needed {
  seq: number;
  path: string;
  blob: string;
  /** bytes the blob must hold */
  size: number;
}

/** Every before-image an undo of `ops` would write back, with the size the journal recorded. */
export function neededImages(ops: readonly Operation[]): Needed[] {
  const out: Needed[] = [];
  const add = (op: Operation, i: number, blob: string | undefined, size: number | undefined) => {
    if (blob !== undefined && size !== undefined) out.push({ seq: op.seq, path: op.paths[i] as string, blob, size });
  };
  const addState = (op: Operation, i: number, s: State) => {
    if (s?.type !== 'file') return;
    add(op, i, s.blob, s.size);
    for (const r of s.ranges ?? []) add(op, i, r.blob, r.length);
  };
  for (const op of ops) {
    const b0 = op.before[0] ?? null;
    switch (op.op) {
      case 'create':
      case 'unlink':
        addState(op, 0, b0);
        break;
      case 'write':
      case 'truncate':
        if (op.capture) add(op, 0, op.capture.blob, op.capture.size);
        else addState(op, 0, b0);
        // (a range's hole needs no blob)
        for (const r of op.ranges ?? []) add(op, 0, r.blob, r.length);
        break;
      case 'rename':
        addState(op, 1, op.before[1] ?? null);
        break;
      default:
        break;
    }
  }
  return out;
}

/**
 * Check every before-image an undo of `ops` needs against the hash that names it (and the size
 * the journal recorded), before the rollback changes anything: a missing or damaged one would be
 * written back as the "restored" content. Each blob is read once however many operations use it.
 */
export async function damagedImages(ops: readonly Operation[], blobs: BlobStore): Promise<DamagedImage[]> {
  const verdict = new Map<string, string | null>();
  const out: DamagedImage[] = [];
  for (const n of neededImages(ops)) {
    let why = verdict.get(`${n.blob}:${n.size}`);
    if (why === undefined) {
      why = await check(blobs, n.blob, n.size);
      verdict.set(`${n.blob}:${n.size}`, why);
    }
    if (why !== null) out.push({ seq: n.seq, path: n.path, blob: n.blob, reason: why });
  }
  return out;
}

async function check(blobs: BlobStore, blob: string, size: number): Promise<string | null> {
  if (blobs.mirror) {
    try {
      await blobs.ensure([blob]);
    } catch (err) {
      return (err as Error).message.replace(/^journal: /, '');
    }
  }
  const file = blobs.pathOf(blob);
  let st: fs.Stats;
  try {
    st = await fs.promises.stat(file);
  } catch {
    return 'missing from the blob store';
  }
  // a copy the backend kept has no sha256 of ours to compare (its download was checked)
  if (keptByBackend(blob)) return null;
  if (st.size !== size) return `holds ${st.size} bytes, the journal recorded ${size}`;
  const got = await hashFile(file);
  return got === blob ? null : `its content does not match its hash (sha256 ${got.slice(0, 12)}…)`;
}

/** One sentence (and a line per image) naming what cannot be restored. */
export function describeDamage(damaged: readonly DamagedImage[]): string {
  const lines = damaged.slice(0, 20).map((d) => `  #${d.seq} ${d.path}: blob ${d.blob.slice(0, 16)}… ${d.reason}`);
  if (damaged.length > 20) lines.push(`  … and ${damaged.length - 20} more`);
  return [
    `Rollback refused, nothing was changed: ${damaged.length} before-image(s) it would write back are missing or damaged ('ledgerfs verify' checks the whole journal):`,
    ...lines,
  ].join('\n');
}
