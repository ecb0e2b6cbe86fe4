import type { Attr } from '../core/index.js';
import type { DirEntryAttr, FsOps } from './binding.js';

/**
 * What every node shows, whatever the store holds (`mount --uid/--gid/--file-mode/--dir-mode`,
 * as gcsfuse and bindfs name them): a sandbox user that owns nothing in the source can then use
 * the mount as its owner. Display only: the store keeps its owners and modes, and every change
 * is judged on those (policy/privileges.ts), never on what is shown.
 */
export interface DisplayOverrides {
  uid?: number;
  gid?: number;
  /** permission bits (at most 0o777: a displayed setuid bit would be honoured by exec) of every non-directory, non-symlink */
  fileMode?: number;
  dirMode?: number;
}

/** (uid_t)-1: "leave unchanged" */
const KEEP_ID = 0xffffffff;

export function hasOverrides(d: DisplayOverrides | undefined): d is DisplayOverrides {
  return d !== undefined && (d.uid !== undefined || d.gid !== undefined || d.fileMode !== undefined || d.dirMode !== undefined);
}

export function displayAttr(a: Attr, d: DisplayOverrides): Attr {
  const perm = a.type === 'dir' ? d.dirMode : a.type === 'symlink' ? undefined : d.fileMode;
  if (perm === undefined && d.uid === undefined && d.gid === undefined) return a;
  return {
    ...a,
    mode: perm === undefined ? a.mode : (a.mode & ~0o7777) | perm,
    uid: d.uid ?? a.uid,
    gid: d.gid ?? a.gid,
  };
}

/**
 * The ops with their attributes shown through `d`. A chown to the shown owner is what the kernel
 * let through as "no change" (default_permissions checks the shown owner), so it goes on as no
 * change of that id: it must not give a store node to the caller. Any other id goes on as asked,
 * judged as always.
 */
export function displayOps(ops: FsOps, d: DisplayOverrides): FsOps {
  const show = (a: Attr) => displayAttr(a, d);
  const showEntries = (es: DirEntryAttr[]) => es.map((e) => (e.attr ? { name: e.name, attr: show(e.attr) } : e));
  const out: FsOps = {
    ...ops,
    getattr: (c, p) => ops.getattr(c, p).then(show),
    fgetattr: (c, p, fh) => ops.fgetattr(c, p, fh).then(show),
    chown: (c, p, uid, gid) => {
      const u = d.uid !== undefined && uid === d.uid ? KEEP_ID : uid;
      const g = d.gid !== undefined && gid === d.gid ? KEEP_ID : gid;
      return u === KEEP_ID && g === KEEP_ID ? Promise.resolve() : ops.chown(c, p, u, g);
    },
  };
  const plus = ops.readdirPlus;
  if (plus) out.readdirPlus = (c, p) => plus(c, p).then(showEntries);
  return out;
}
