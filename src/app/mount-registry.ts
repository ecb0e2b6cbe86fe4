import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { DEFAULTS } from '../config/index.js';
import { pidAlive } from '../core/index.js';
import { isLedgerfsMount, listMounts, type MountEntry } from '../fuse/index.js';

/**
 * What the mount table cannot say about a live mount (its journal, binding, daemon pid): each
 * daemon writes one small file in DEFAULTS.mountRegistryDir while it serves, and removes it when
 * it ends. The mount table stays the truth: an entry counts only while a ledgerfs mount with its
 * fsname is at its mount point and its pid lives.
 */
export interface MountRecord {
  mountpoint: string;
  /** the fsname: ledgerfs:/abs/source or gs://bucket/prefix */
  source: string;
  stateDir: string | null;
  session: string | null;
  binding: string;
  pid: number;
  /** ISO 8601 with zone */
  started: string;
}

export interface LiveMount extends MountEntry {
  /** null: a ledgerfs mount with no record (an older daemon, or one that is gone: a dead mount) */
  record: MountRecord | null;
}

function fileOf(mountpoint: string): string {
  const h = crypto.createHash('sha256').update(path.resolve(mountpoint)).digest('hex').slice(0, 16);
  return path.join(DEFAULTS.mountRegistryDir, `${h}.json`);
}

/** Note a mount that is up; returns the remover (best effort: a registry that cannot be written costs only `status` detail). */
export function registerMount(r: MountRecord): () => void {
  const file = fileOf(r.mountpoint);
  try {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    fs.writeFileSync(`${file}.${process.pid}`, JSON.stringify(r, null, 2) + '\n', { mode: 0o600 });
    fs.renameSync(`${file}.${process.pid}`, file);
  } catch {
    return () => undefined;
  }
  return () => {
    try {
      const cur = JSON.parse(fs.readFileSync(file, 'utf8')) as MountRecord;
      if (cur.pid === r.pid) fs.unlinkSync(file);
    } catch {
      /* gone already */
    }
  };
}

function recordAt(m: MountEntry): MountRecord | null {
  try {
    const r = JSON.parse(fs.readFileSync(fileOf(m.mountpoint), 'utf8')) as MountRecord;
    return r.mountpoint === m.mountpoint && r.source === m.source && pidAlive(r.pid) ? r : null;
  } catch {
    return null;
  }
}

/** Every ledgerfs mount in the mount table, with its record where one is live. */
export function liveMounts(): LiveMount[] {
  return listMounts().filter(isLedgerfsMount).map((m) => ({ ...m, record: recordAt(m) }));
}
