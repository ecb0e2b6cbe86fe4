import { hasRawBytes, VfsError } from '../../core/index.js';

const CR_LF = /[\r\n]/;

/**
 * View paths <-> object names. A file `/a/b` is the object `<prefix>a/b`; a directory `/a` is
 * the placeholder object `<prefix>a/` and/or the common prefix `<prefix>a/` of other objects;
 * the root is the prefix itself.
 */
export class ObjectNames {
  constructor(readonly prefix: string) {}

  /** Object name of a file or symlink at `path` (not meaningful for "/"). */
  key(path: string): string {
    // Object names are UTF-8: a name with other bytes (core/names.ts) cannot be stored, nor exist.
    if (hasRawBytes(path)) throw new VfsError('EILSEQ', `${path}: the name is not valid UTF-8, and GCS object names must be`);
    // Checked here, not left to the bucket: with --durability journal a create reaches GCS only
    // after close(2) has succeeded, too late to refuse the name.
    if (CR_LF.test(path)) throw new VfsError('EINVAL', `${JSON.stringify(path)}: GCS object names cannot hold a carriage return or line feed`);
    const k = this.prefix + path.slice(1);
    // GCS caps names at 1024 bytes of UTF-8; a longer path cannot exist there.
    if (Buffer.byteLength(k) + 1 > 1024) throw new VfsError('ENAMETOOLONG', `${path}: object name would exceed 1024 bytes`);
    return k;
  }

  /** Placeholder/prefix name of the directory at `path` ("" or "<prefix>" for the root). */
  dirKey(path: string): string {
    return path === '/' ? this.prefix : this.key(path) + '/';
  }

  /** View path of an object name under the prefix. */
  pathOf(key: string): string {
    return '/' + key.slice(this.prefix.length).replace(/\/$/, '');
  }
}

/**
 * Whether one name component (what follows a directory's prefix, up to the next '/') can be a
 * POSIX directory entry. Names GCS allows but POSIX cannot show are left out of listings:
 * empty components (from a run of '/', e.g. `a//b`), `.` and `..`, NUL, and components longer
 * than NAME_MAX (255 bytes).
 */
export function isPosixName(name: string): boolean {
  return name !== '' && name !== '.' && name !== '..' && !name.includes('\0') && !name.includes('/') && Buffer.byteLength(name) <= 255;
}
