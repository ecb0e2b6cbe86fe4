import { VfsError } from './errors.js';

/**
 * View and backend paths are absolute, '/'-separated, without '.', '..', empty components or a
 * trailing slash ("/" is the root). The kernel only sends such paths; everything else (CLI,
 * journal replay) is checked here so no layer below ever sees '..'.
 */
export function checkPath(path: string): string {
  if (path === '/') return path;
  if (path.length === 0 || path[0] !== '/' || path.endsWith('/') || path.includes('\0')) {
    throw new VfsError('EINVAL', `not a normalized absolute path: ${JSON.stringify(path)}`);
  }
  for (const part of path.split('/').slice(1)) {
    if (part === '' || part === '.' || part === '..') {
      throw new VfsError('EINVAL', `path component ${JSON.stringify(part)} not allowed in ${JSON.stringify(path)}`);
    }
    if (Buffer.byteLength(part) > 255) throw new VfsError('ENAMETOOLONG', `name too long in ${path}`);
  }
  return path;
}

/** Normalize a user-supplied path ("a/b/", "/a//b") to the canonical form; rejects '..'. */
export function normalizePath(input: string): string {
  const parts = input.split('/').filter((p) => p !== '' && p !== '.');
  return checkPath('/' + parts.join('/'));
}

export function parentOf(path: string): string {
  const i = path.lastIndexOf('/');
  return i <= 0 ? '/' : path.slice(0, i);
}

export function baseName(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

export function joinPath(dir: string, name: string): string {
  return dir === '/' ? '/' + name : dir + '/' + name;
}

/** True if `path` is `dir` itself or lies below it. */
export function isWithin(path: string, dir: string): boolean {
  if (dir === '/') return true;
  return path === dir || (path.startsWith(dir) && path.charCodeAt(dir.length) === 47);
}

/** Re-root `path` from under `from` to under `to` (for renames of directories). */
export function rebase(path: string, from: string, to: string): string {
  return path === from ? to : to + path.slice(from.length);
}
