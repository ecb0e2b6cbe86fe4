import { constants as C } from 'node:fs';
import type { Attr, NodeType, SpecialType } from '../../core/index.js';

/*
 * POSIX attributes kept in custom object metadata, under the keys other tools already use, so a
 * bucket written by ledgerfs reads right in gcsfuse, gsutil/gcloud and the Cloud console, and
 * the other way round:
 *   gcsfuse_mtime            mtime, RFC 3339 with up to nanoseconds, UTC (gcsfuse writes Go's
 *                            time.RFC3339Nano; it is the only POSIX key gcsfuse has besides)
 *   gcsfuse_symlink_target   symlink target (the object itself is empty)
 *   goog-reserved-posix-mode permission bits, octal ("644"); gsutil/gcloud `-P` use these
 *   goog-reserved-posix-uid  decimal; gcsfuse has no mode/uid/gid keys (it applies --file-mode,
 *   goog-reserved-posix-gid  --uid, --gid flags to every inode), so gsutil's are the shared ones
 *   goog-reserved-file-atime atime, seconds since the epoch (gsutil's key); written only by utimens
 *   goog-reserved-file-mtime read as a fallback mtime (seconds) for objects gsutil uploaded
 *   ledgerfs_atime           atime with nanoseconds (RFC 3339, as gcsfuse_mtime), beside gsutil's
 *                            whole seconds; used only while its second agrees with gsutil's key
 *                            (a tool that set that key later wins)
 *   ledgerfs_special         fifo | socket | chardev | blockdev: the object (empty) is that special
 *   ledgerfs_rdev            file (mknod); gcsfuse and gsutil define no key for them, so ours are
 *                            named for us. Other tools see an empty file.
 * Objects without these keys get the configured defaults and the object's `updated` time.
 */
export const META = {
  mtime: 'gcsfuse_mtime',
  symlinkTarget: 'gcsfuse_symlink_target',
  mode: 'goog-reserved-posix-mode',
  uid: 'goog-reserved-posix-uid',
  gid: 'goog-reserved-posix-gid',
  atime: 'goog-reserved-file-atime',
  atimeNs: 'ledgerfs_atime',
  gsutilMtime: 'goog-reserved-file-mtime',
  special: 'ledgerfs_special',
  rdev: 'ledgerfs_rdev',
} as const;

const SPECIAL_TYPES: readonly SpecialType[] = ['fifo', 'socket', 'chardev', 'blockdev'];

/** The subset of an object resource the backend uses, parsed (int64 strings -> bigint). */
export interface ObjectInfo {
  name: string;
  generation: bigint;
  metageneration: bigint;
  size: number;
  updatedNs: bigint;
  contentType?: string;
  crc32c?: string;
  metadata: Record<string, string>;
}

/** What the client hands back as `file.metadata` (loosely typed there). */
export interface RawObjectMetadata {
  name?: string;
  generation?: string | number;
  metageneration?: string | number;
  size?: string | number;
  updated?: string;
  contentType?: string;
  crc32c?: string;
  metadata?: Record<string, unknown> | null;
}

export function objectInfo(raw: RawObjectMetadata): ObjectInfo {
  const metadata: Record<string, string> = {};
  for (const [k, v] of Object.entries(raw.metadata ?? {})) {
    if (v !== null && v !== undefined) metadata[k] = String(v);
  }
  return {
    name: raw.name ?? '',
    generation: BigInt(raw.generation ?? 0),
    metageneration: BigInt(raw.metageneration ?? 0),
    size: Number(raw.size ?? 0),
    updatedNs: raw.updated ? parseRfc3339Ns(raw.updated) ?? 0n : 0n,
    ...(raw.contentType !== undefined ? { contentType: raw.contentType } : {}),
    ...(raw.crc32c !== undefined ? { crc32c: raw.crc32c } : {}),
    metadata,
  };
}

/** POSIX attributes as found in (or to be written to) custom metadata; absent = not recorded. */
export interface NodeMeta {
  /** permission bits only (0o7777) */
  perm?: number;
  uid?: number;
  gid?: number;
  mtimeNs?: bigint;
  atimeNs?: bigint;
  symlinkTarget?: string;
  /** a FIFO, socket or device node (an empty object) */
  special?: SpecialType;
  /** device number of a character or block device */
  rdev?: number;
}

export function readNodeMeta(m: Record<string, string>): NodeMeta {
  const n: NodeMeta = {};
  const mode = m[META.mode];
  if (mode !== undefined && /^[0-7]{3,4}$/.test(mode)) n.perm = parseInt(mode, 8);
  // (an id the kernel can carry: 32 bits, not (uid_t)-1; the kernel would wrap a larger one)
  const id = (v: string | undefined) => (v !== undefined && /^\d{1,10}$/.test(v) && Number(v) < 0xffffffff ? Number(v) : undefined);
  const uid = id(m[META.uid]);
  if (uid !== undefined) n.uid = uid;
  const gid = id(m[META.gid]);
  if (gid !== undefined) n.gid = gid;
  const mt = m[META.mtime] !== undefined ? parseRfc3339Ns(m[META.mtime] as string) : undefined;
  if (mt !== undefined) n.mtimeNs = mt;
  else if (m[META.gsutilMtime] !== undefined && /^-?\d+$/.test(m[META.gsutilMtime] as string)) n.mtimeNs = BigInt(m[META.gsutilMtime] as string) * 1_000_000_000n;
  const at = m[META.atime];
  if (at !== undefined && /^-?\d+$/.test(at)) {
    const sec = BigInt(at);
    const fine = m[META.atimeNs] !== undefined ? parseRfc3339Ns(m[META.atimeNs] as string) : undefined;
    n.atimeNs = fine !== undefined && floorDiv(fine, 1_000_000_000n) === sec ? fine : sec * 1_000_000_000n;
  }
  if (m[META.symlinkTarget] !== undefined) n.symlinkTarget = m[META.symlinkTarget];
  const special = m[META.special] as SpecialType | undefined;
  if (special !== undefined && SPECIAL_TYPES.includes(special)) n.special = special;
  const rdev = m[META.rdev];
  if (rdev !== undefined && /^\d+$/.test(rdev)) n.rdev = Number(rdev);
  return n;
}

/** The metadata entries for the recorded fields of `n` (others untouched by a merge). */
export function nodeMetaEntries(n: NodeMeta): Record<string, string> {
  const out: Record<string, string> = {};
  if (n.perm !== undefined) {
    const p = n.perm & 0o7777;
    // gsutil accepts exactly three octal digits; a fourth only when setuid/setgid/sticky is set.
    out[META.mode] = p > 0o777 ? p.toString(8).padStart(4, '0') : p.toString(8).padStart(3, '0');
  }
  if (n.uid !== undefined) out[META.uid] = String(n.uid);
  if (n.gid !== undefined) out[META.gid] = String(n.gid);
  if (n.mtimeNs !== undefined) out[META.mtime] = formatRfc3339Ns(n.mtimeNs);
  if (n.atimeNs !== undefined) {
    out[META.atime] = String(floorDiv(n.atimeNs, 1_000_000_000n));
    out[META.atimeNs] = formatRfc3339Ns(n.atimeNs);
  }
  if (n.symlinkTarget !== undefined) out[META.symlinkTarget] = n.symlinkTarget;
  if (n.special !== undefined) out[META.special] = n.special;
  if (n.rdev !== undefined) out[META.rdev] = String(n.rdev);
  return out;
}

export type ObjectType = Exclude<NodeType, 'dir'>;

export function typeOfObject(info: ObjectInfo): ObjectType {
  if (info.metadata[META.symlinkTarget] !== undefined) return 'symlink';
  const special = info.metadata[META.special] as SpecialType | undefined;
  return special !== undefined && SPECIAL_TYPES.includes(special) ? special : 'file';
}

export interface AttrDefaults {
  fileMode: number;
  dirMode: number;
  uid: number;
  gid: number;
  /** time shown for directories that have no placeholder (nothing records one) */
  implicitTimeNs: bigint;
}

const IFMT: Record<NodeType, number> = {
  file: C.S_IFREG, dir: C.S_IFDIR, symlink: C.S_IFLNK,
  fifo: C.S_IFIFO, socket: C.S_IFSOCK, chardev: C.S_IFCHR, blockdev: C.S_IFBLK,
};

/**
 * Attributes of a node from its object (file, symlink, directory placeholder) or, for an
 * implicit directory, from nothing but defaults. ctime is the object's `updated` time, which
 * GCS bumps on every data or metadata change.
 */
export function attrOf(type: NodeType, path: string, info: ObjectInfo | undefined, d: AttrDefaults, ino = inodeNumber(path)): Attr {
  const n = info ? readNodeMeta(info.metadata) : {};
  const defaultPerm = type === 'dir' ? d.dirMode : type === 'symlink' ? 0o777 : d.fileMode;
  const size = type === 'dir' ? 4096 : type === 'symlink' ? Buffer.byteLength(n.symlinkTarget ?? '') : type === 'file' ? (info?.size ?? 0) : 0;
  const changed = info ? info.updatedNs : d.implicitTimeNs;
  const mtime = n.mtimeNs ?? changed;
  return {
    type,
    mode: IFMT[type] | ((n.perm ?? defaultPerm) & 0o7777),
    size,
    nlink: type === 'dir' ? 2 : 1,
    uid: n.uid ?? d.uid,
    gid: n.gid ?? d.gid,
    ino,
    blocks: Math.ceil(size / 512),
    atimeNs: n.atimeNs ?? mtime,
    mtimeNs: mtime,
    ctimeNs: changed,
    ...((type === 'chardev' || type === 'blockdev') ? { rdev: n.rdev ?? 0 } : {}),
  };
}

/**
 * An inode number per path (FNV-1a, 48 bits so it stays exact as a JS number); the root is 1.
 * Objects have no inode identity; the backend carries a number across renames (gcs/inodes.ts).
 */
export function inodeNumber(path: string): number {
  if (path === '/') return 1;
  let h = 0xcbf29ce484222325n;
  for (const b of Buffer.from(path)) {
    h ^= BigInt(b);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  const n = Number(h & 0xffffffffffffn);
  return n < 2 ? n + 2 : n;
}

function floorDiv(a: bigint, b: bigint): bigint {
  const q = a / b;
  return a % b !== 0n && a < 0n !== b < 0n ? q - 1n : q;
}

/** Go's time.RFC3339Nano in UTC: "2024-05-01T10:20:30.123456789Z", trailing zeros dropped. */
export function formatRfc3339Ns(ns: bigint): string {
  const sec = floorDiv(ns, 1_000_000_000n);
  const frac = ns - sec * 1_000_000_000n;
  const base = new Date(Number(sec) * 1000).toISOString().replace(/\.\d{3}Z$/, '');
  if (frac === 0n) return base + 'Z';
  return `${base}.${frac.toString().padStart(9, '0').replace(/0+$/, '')}Z`;
}

/** RFC 3339 with any offset and up to nanosecond precision; undefined if malformed. */
export function parseRfc3339Ns(s: string): bigint | undefined {
  const m = /^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9})\d*)?([Zz]|[+-]\d{2}:\d{2})$/.exec(s);
  if (!m) return undefined;
  const ms = Date.parse(`${m[1]}T${m[2]}${m[4] === 'z' ? 'Z' : m[4]}`);
  if (Number.isNaN(ms)) return undefined;
  const frac = m[3] ? BigInt(m[3].padEnd(9, '0')) : 0n;
  return BigInt(ms) * 1_000_000n + frac;
}
