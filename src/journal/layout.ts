import fs from 'node:fs';
import path from 'node:path';

/*
 * What lives in a state directory:
 *   journal/000001.log ...   segments, appended in order, rolled at a size limit; each writer
 *                            starts a new one, framed by a `segment` and a `close` record
 *   journal/writing.json     the segment a writer is writing (removed when it closes cleanly):
 *                            only that segment may end without its close record (a crash)
 *   journal-index.json       what each segment holds (sessions, paths, seqs, times), so queries read
 *                            only the segments they need; a cache, rebuilt from the segments
 *                            (segment-index.ts)
 *   blobs/ab/cdef...         before-images by sha256; blobs/tmp/ holds captures in progress
 *   lock                     pid of the one process writing the journal (daemon or CLI)
 *   workspace.json           how the last mount named the workspace (--source/--policy), so
 *                            commands given only --state can open it too
 *   daemon.json, daemon.sock the live daemon's control socket (rollback/gc through the mount)
 *   staging/                 (GCS) writes staged locally until they are uploaded
 *   upload-spool/            (GCS, durability journal) closed versions waiting for their upload:
 *                            <id>.data + <id>.json, fsynced before close(2) returns
 *   conflicts/               (GCS) local versions another writer's change kept out of the
 *                            bucket (or whose upload failed), each with a .json note
 *   limit-counts/<session>.json  what a session has counted against its `limits:` so far, so a
 *                            remount of the session goes on from there (app/limit-counts.ts)
 *   staged/<session>/        a staged session's overlay (backend/layers/staged.ts)
 */

export const SEGMENT_RE = /^(\d{6,})\.log$/;

export interface StateLayout {
  root: string;
  journalDir: string;
  blobsDir: string;
  journalIndex: string;
  lockFile: string;
  daemonInfo: string;
  daemonSocket: string;
  workspaceInfo: string;
  stagingDir: string;
  conflictsDir: string;
  uploadSpool: string;
  limitCountsDir: string;
}

export function stateLayout(root: string): StateLayout {
  return {
    root,
    journalDir: path.join(root, 'journal'),
    blobsDir: path.join(root, 'blobs'),
    journalIndex: path.join(root, 'journal-index.json'),
    lockFile: path.join(root, 'lock'),
    daemonInfo: path.join(root, 'daemon.json'),
    daemonSocket: path.join(root, 'daemon.sock'),
    workspaceInfo: path.join(root, 'workspace.json'),
    stagingDir: path.join(root, 'staging'),
    conflictsDir: path.join(root, 'conflicts'),
    uploadSpool: path.join(root, 'upload-spool'),
    limitCountsDir: path.join(root, 'limit-counts'),
  };
}

export function segmentName(index: number): string {
  return String(index).padStart(6, '0') + '.log';
}

export interface SegmentFile {
  index: number;
  path: string;
}

/** Segments in write order; an absent journal directory is an empty journal. */
export function listSegments(journalDir: string): SegmentFile[] {
  let names: string[];
  try {
    names = fs.readdirSync(journalDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const out: SegmentFile[] = [];
  for (const n of names) {
    const m = SEGMENT_RE.exec(n);
    if (m) out.push({ index: Number(m[1]), path: path.join(journalDir, n) });
  }
  return out.sort((a, b) => a.index - b.index);
}

/** fsync a directory so a file created or renamed in it survives a power loss. */
export function syncDir(dir: string): void {
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** The file naming the segment a writer is writing (removed when it closes cleanly). */
export function writingMarker(journalDir: string): string {
  return path.join(journalDir, 'writing.json');
}

/** The segment a writer is writing, or was writing when it stopped without closing (a crash). */
export function segmentBeingWritten(journalDir: string): number | null {
  try {
    const v = JSON.parse(fs.readFileSync(writingMarker(journalDir), 'utf8')) as { segment?: unknown };
    return typeof v.segment === 'number' ? v.segment : null;
  } catch {
    return null;
  }
}
