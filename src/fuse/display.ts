import { type Attr, type Caller, VfsError } from '../core/index.js';
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
 * The ops with their attributes shown through `d`. The kernel checks the shown owner
 * (default_permissions), so with `--uid` every caller seems to own every node and the kernel
 * lets chmod and chown through. The store's real owner decides again here, as the kernel would
 * without display options: only root or the node's real owner may chmod it or change its owner
 * or group. A chown to the shown owner is what the kernel let through as "no change": it goes on
 * as no change of that id, and must not give a store node to the caller. What passes is then
 * judged by the policy's privilege rules as always (policy/privileges.ts).
 */
export function displayOps(ops: FsOps, d: DisplayOverrides): FsOps {
  const show = (a: Attr) => displayAttr(a, d);
  const showEntries = (es: DirEntryAttr[]) => es.map((e) => (e.attr ? { name: e.name, attr: show(e.attr) } : e));
  /** the kernel judged ownership on the shown owner: judge it on the real one */
  const ownerOnly = async (c: Caller, p: string, op: string): Promise<void> => {
    if (d.uid === undefined || c.uid === 0) return;
    const real = await ops.getattr(c, p);
    // a binding that does not know the caller: only a node whose real owner is the shown one
    const owner = c.uid ?? d.uid;
    if (real.uid !== owner) {
      throw new VfsError('EPERM', `${op} ${p} refused: its real owner is uid ${real.uid}; --uid ${d.uid} only shows the caller as its owner`);
    }
  };
  // (an op that answers with the node's attributes answers with the shown ones)
  const shown = (a: Attr | void): Attr | void => (a ? show(a) : a);
  const out: FsOps = {
    ...ops,
    getattr: (c, p) => ops.getattr(c, p).then(show),
    fgetattr: (c, p, fh) => ops.fgetattr(c, p, fh).then(show),
    create: async (c, p, mode, flags, made) => {
      const fh = await ops.create(c, p, mode, flags, made);
      if (made?.attr) made.attr = show(made.attr);
      return fh;
    },
    mkdir: (c, p, mode) => ops.mkdir(c, p, mode).then(shown),
    symlink: (c, target, p) => ops.symlink(c, target, p).then(shown),
    mknod: (c, p, mode, rdev) => ops.mknod(c, p, mode, rdev).then(shown),
    utimens: (c, p, times) => ops.utimens(c, p, times).then(shown),
    chmod: async (c, p, mode) => {
      await ownerOnly(c, p, 'chmod');
      return shown(await ops.chmod(c, p, mode));
    },
    chown: async (c, p, uid, gid) => {
      const u = d.uid !== undefined && uid === d.uid ? KEEP_ID : uid;
      const g = d.gid !== undefined && gid === d.gid ? KEEP_ID : gid;
      if (u === KEEP_ID && g === KEEP_ID) return;
      await ownerOnly(c, p, 'chown');
      return shown(await ops.chown(c, p, u, g));
    },
  };
  const lookup = ops.lookup;
  if (lookup) out.lookup = (c, p) => lookup(c, p).then((a) => a && show(a));
  const plus = ops.readdirPlus;
  if (plus) out.readdirPlus = (c, p) => plus(c, p).then(showEntries);
  return out;
}
