import { type Attr, errnoName, errnoOf, isSpecial, typeOfMode } from '../core/index.js';
import { localAddon } from './local-addon.js';

/*
 * The local backend's symlink-free path resolution in one syscall (native/ledgerfs_beneath.c, in
 * the ledgerfs_local addon:
 * openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS from a descriptor of the backend root),
 * instead of realpath(3)'s readlink per component of the host path. stat and open resolve the
 * node itself that way, so there is no window between the check and the use.
 * Optional: without the addon (not built) or without openat2 (kernel < 5.6), `loadBeneath()`
 * answers null and the backend keeps its realpath check.
 */

interface Addon {
  check(root: number, parent: string): number;
  lstat(root: number, parent: string, name: string): number;
  /** absent in an addon built before it */
  fstat?(fd: number): number;
  open(root: number, parent: string, name: string, flags: number, mode: number): number;
  mknod(root: number, parent: string, name: string, mode: number, dev: number): number;
  setRecord(buf: ArrayBuffer): void;
  PARENT: number;
}

/** What a call answered: the errno name, and whether the parent (not the node) failed. */
export interface BeneathFailure {
  code: string;
  parent: boolean;
}

// mode size nlink uid gid ino blocks as doubles, atime mtime ctime seconds as int64, rdev as a
// double, then the times' nanoseconds as int32 (seconds and nanoseconds apart: a 64-bit
// nanosecond count ends in 2262)
const record = new ArrayBuffer(104);
const nums = new Float64Array(record, 0, 11);
const times = new BigInt64Array(record, 56, 3);
const nanos = new Int32Array(record, 88, 3);
const time = (i: number): bigint => (times[i] as bigint) * 1_000_000_000n + BigInt(nanos[i] as number);

const NO_ENTRY = -errnoOf('ENOENT');

export class Beneath {
  constructor(private readonly addon: Addon) {}

  /** decode a negative result */
  failure(r: number): BeneathFailure {
    const e = -r;
    const parent = e >= this.addon.PARENT;
    return { code: errnoName(parent ? e - this.addon.PARENT : e), parent };
  }

  /** 0, or a negative result for failure() */
  check(rootFd: number, parent: string): number {
    return this.addon.check(rootFd, parent);
  }

  /** the node itself (a final symlink is not followed), undefined if it (or its parent) is not
   * there, or a negative result for failure() */
  lstat(rootFd: number, parent: string, name: string): Attr | number | undefined {
    const r = this.addon.lstat(rootFd, parent, name);
    if (r === NO_ENTRY) return undefined; // the node (or its parent) is not there
    if (r < 0) return r;
    return fromRecord();
  }

  /**
   * fstat(2) of an open descriptor, as lstat answers (no Stats object, no BigInt per field):
   * the attributes, or -errno; null when the addon predates it (then fs.fstatSync).
   */
  fstat(fd: number): Attr | number | null {
    const f = this.addon.fstat;
    if (f === undefined) return null;
    const r = f(fd);
    return r < 0 ? r : fromRecord();
  }

  /** 0, or a negative result for failure() */
  mknod(rootFd: number, parent: string, name: string, mode: number, dev: number): number {
    return this.addon.mknod(rootFd, parent, name, mode, dev);
  }

  /** a descriptor (O_NOFOLLOW, O_CLOEXEC added), or a negative result for failure() */
  open(rootFd: number, parent: string, name: string, flags: number, mode: number): number {
    return this.addon.open(rootFd, parent, name, flags, mode);
  }
}

/** the attributes the addon's last lstat or fstat put in the record */
function fromRecord(): Attr {
  const mode = nums[0] as number;
  const type = typeOfMode(mode);
  const a: Attr = {
    type,
    mode,
    size: nums[1] as number,
    nlink: nums[2] as number,
    uid: nums[3] as number,
    gid: nums[4] as number,
    ino: nums[5] as number,
    blocks: nums[6] as number,
    atimeNs: time(0),
    mtimeNs: time(1),
    ctimeNs: time(2),
  };
  if (isSpecial(type)) a.rdev = nums[10] as number;
  return a;
}

let loaded: Beneath | null | undefined;

/** The helper, or null when it cannot be used here (then the caller keeps its own check). */
export function loadBeneath(): Beneath | null {
  if (loaded !== undefined) return loaded;
  loaded = null;
  if (process.env.LEDGERFS_NO_OPENAT2) return loaded; // the realpath path, for A/B and tests
  const addon = localAddon() as Addon | null;
  if (!addon) return loaded; // not built: the install said so (scripts/build-native.mjs)
  try {
    addon.setRecord(record);
    // No openat2 (ENOSYS), or a seccomp filter refusing it (EPERM), shows on the first call:
    // this probe cannot fail for any other reason, so any failure keeps the realpath check.
    const probe = addon.check(-100 /* AT_FDCWD */, '.');
    if (probe < 0) return loaded;
    loaded = new Beneath(addon);
  } catch {
    // an addon from another build that lacks these functions: keep the realpath check
  }
  return loaded;
}
