import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/** One node of a directory tree as rollback must restore it. */
export interface TreeEntry {
  type: 'file' | 'dir' | 'symlink';
  mode: number;
  /** files: sha256 of the bytes plus their length; symlinks: the target */
  content: string;
}

/**
 * Everything below `root` (relative paths, sorted), with types, permission bits, bytes and
 * symlink targets: what the rollback tests compare. `skip` leaves out names at the top level.
 */
export function snapshotTree(root: string, skip: string[] = []): Record<string, TreeEntry> {
  const out: Record<string, TreeEntry> = {};
  const walk = (dir: string, rel: string) => {
    for (const name of fs.readdirSync(dir).sort()) {
      if (rel === '' && skip.includes(name)) continue;
      const p = path.join(dir, name);
      const r = rel === '' ? name : `${rel}/${name}`;
      const st = fs.lstatSync(p);
      if (st.isSymbolicLink()) out[r] = { type: 'symlink', mode: 0, content: fs.readlinkSync(p) };
      else if (st.isDirectory()) {
        out[r] = { type: 'dir', mode: st.mode & 0o7777, content: '' };
        walk(p, r);
      } else {
        const data = fs.readFileSync(p);
        out[r] = { type: 'file', mode: st.mode & 0o7777, content: `${data.length}:${crypto.createHash('sha256').update(data).digest('hex').slice(0, 16)}` };
      }
    }
  };
  walk(root, '');
  return out;
}
