import { joinPath, type Logger, parentOf, VfsError } from '../core/index.js';
import type { Vfs } from '../vfs/index.js';
import type { FsOps } from './binding.js';

/** Request counters by op, for `--log-level debug` summaries and the bench. */
export class OpCounters {
  readonly calls = new Map<string, number>();
  readonly errors = new Map<string, number>();
  bump(op: string): void {
    this.calls.set(op, (this.calls.get(op) ?? 0) + 1);
  }
  fail(op: string): void {
    this.errors.set(op, (this.errors.get(op) ?? 0) + 1);
  }
  snapshot(): Record<string, { calls: number; errors: number }> {
    const out: Record<string, { calls: number; errors: number }> = {};
    for (const [op, n] of this.calls) out[op] = { calls: n, errors: this.errors.get(op) ?? 0 };
    return out;
  }
}

/**
 * The adapter maps binding requests onto the core: arguments in, results out, errors logged.
 * ENOENT on lookups is the normal answer to "does this exist?" and is not logged.
 */
export function vfsOps(vfs: Vfs, log: Logger, counters = new OpCounters()): FsOps {
  const debug = log.isLevelEnabled('debug');
  const track = <T>(op: string, path: string | null, p: Promise<T>): Promise<T> => {
    if (!debug) return p;
    counters.bump(op);
    return p.catch((err: unknown) => {
      counters.fail(op);
      if (!(err instanceof VfsError && err.code === 'ENOENT')) {
        log.debug({ op, path, err: err instanceof VfsError ? err.reason : String(err) }, 'request failed');
      }
      throw err;
    });
  };
  const warnUnexpected = <T>(op: string, path: string | null, p: Promise<T>): Promise<T> =>
    p.catch((err: unknown) => {
      if (!(err instanceof VfsError)) log.error({ op, path, err }, 'unexpected failure (EIO to the caller)');
      throw err;
    });
  const t = <T>(op: string, path: string | null, p: Promise<T>) => warnUnexpected(op, path, track(op, path, p));

  const ops: FsOps = {
    getattr: (_c, path) => t('getattr', path, vfs.getattr(path)),
    fgetattr: (_c, path, fh) => t('fgetattr', path, vfs.fgetattr(fh)),
    access: (_c, path) => t('access', path, vfs.access(path)),
    statfs: (_c, path) => t('statfs', path, vfs.statfs(path)),
    readdir: (_c, path) => t('readdir', path, vfs.readdir(path).then((names) => ['.', '..', ...names])),
    // An entry that vanished (or cannot be stat'ed) between the listing and its getattr goes out
    // without attributes: the kernel then looks it up itself, as after a plain readdir. '.' and
    // '..' get theirs too, so every entry's d_ino is the inode stat shows.
    readdirPlus: (_c, path) => t('readdirplus', path, vfs.readdir(path).then((names) => {
      const attrOf = (name: string, p: string) => vfs.getattr(p).then((attr) => ({ name, attr }), () => ({ name, attr: null }));
      return Promise.all([attrOf('.', path), attrOf('..', parentOf(path)), ...names.map((name) => attrOf(name, joinPath(path, name)))]);
    })),
    readlink: (_c, path) => t('readlink', path, vfs.readlink(path)),
    open: (c, path, flags) => t('open', path, vfs.open(path, flags, c)),
    create: (c, path, mode, flags) => t('create', path, vfs.create(path, mode, flags, c)),
    read: (_c, fh, buf, len, pos) => t('read', null, vfs.read(fh, buf, len, pos)),
    write: (c, fh, buf, len, pos) => t('write', null, vfs.write(fh, buf, len, pos, c)),
    flush: (c, fh) => t('flush', null, vfs.flush(fh, c)),
    fsync: (c, fh, dataOnly) => t('fsync', null, vfs.fsync(fh, dataOnly, c)),
    release: (c, fh) => t('release', null, vfs.release(fh, c)),
    truncate: (c, path, size) => t('truncate', path, vfs.truncate(path, size, c)),
    ftruncate: (c, fh, size) => t('ftruncate', null, vfs.ftruncate(fh, size, c)),
    fallocate: (c, fh, mode, off, len) => t('fallocate', null, vfs.fallocate(fh, mode, off, len, c)),
    copyFileRange: (c, fhIn, offIn, fhOut, offOut, len, flags) => t('copy_file_range', null, vfs.copyFileRange(fhIn, offIn, fhOut, offOut, len, flags, c)),
    lseek: (_c, fh, off, whence) => t('lseek', null, vfs.lseek(fh, off, whence)),
    mkdir: (c, path, mode) => t('mkdir', path, vfs.mkdir(path, mode, c)),
    rmdir: (c, path) => t('rmdir', path, vfs.rmdir(path, c)),
    unlink: (c, path) => t('unlink', path, vfs.unlink(path, c)),
    rename: (c, from, to) => t('rename', from, vfs.rename(from, to, c)),
    symlink: (c, target, path) => t('symlink', path, vfs.symlink(target, path, c)),
    mknod: (c, path, mode, rdev) => t('mknod', path, vfs.mknod(path, mode, rdev, c)),
    link: (c, existing, newPath) => t('link', newPath, vfs.link(existing, newPath, c)),
    chmod: (c, path, mode) => t('chmod', path, vfs.chmod(path, mode, c)),
    chown: (c, path, uid, gid) => t('chown', path, vfs.chown(path, uid, gid, c)),
    utimens: (c, path, times) => t('utimens', path, vfs.utimens(path, times, c)),
  };
  // a store with hard links has real inode numbers (GCS derives them from paths)
  if (vfs.backend.capabilities.hardLinks) ops.inodesNameNodes = true;
  if (vfs.backend.capabilities.xattrs) {
    ops.xattr = {
      get: (_c, path, name) => t('getxattr', path, vfs.getxattr(path, name)),
      set: (c, path, name, value, flags) => t('setxattr', path, vfs.setxattr(path, name, value, flags, c)),
      list: (_c, path) => t('listxattr', path, vfs.listxattr(path)),
      remove: (c, path, name) => t('removexattr', path, vfs.removexattr(path, name, c)),
    };
  }
  return ops;
}
