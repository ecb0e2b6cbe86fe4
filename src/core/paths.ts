import { VfsError } from './errors.js';

/**
 * View and backend paths are absolute, '/'-separated, without '.', '..', empty components or a
 * trailing slash ("/" is the root). The kernel only sends such paths; everything else (CLI,
 * journal replay) is checked here so no layer below ever sees '..'.
 */
export function checkPath(path: string): string {
  if (path === '/') return path;
  const len = path.length;
  if (len === 0 || path.charCodeAt(0) !== SLASH || path.charCodeAt(len - 1) === SLASH || path.includes('\0')) {
    throw new VfsError('EINVAL', `not a normalized absolute path: ${JSON.stringify(path)}`);
  }
  // Every request checks its path, some several times: walk the components in place rather
  // than split them into an array of strings.
  for (let start = 1; start <= len; ) {
    let end = path.indexOf('/', start);
    if (end < 0) end = len;
    const n = end - start;
    if (n === 0 || (n <= 2 && path.charCodeAt(start) === DOT && (n === 1 || path.charCodeAt(start + 1) === DOT))) {
      const part = path.slice(start, end);
      throw new VfsError('EINVAL', `path component ${JSON.stringify(part)} not allowed in ${JSON.stringify(path)}`);
    }
    // a UTF-16 code unit is at most 3 bytes of UTF-8: only a longer name needs counting
    if (n > MAX_NAME_BYTES / 3 && Buffer.byteLength(path.slice(start, end)) > MAX_NAME_BYTES) throw new VfsError('ENAMETOOLONG', `name too long in ${path}`);
    start = end + 1;
  }
  return path;
}

const SLASH = 0x2f;
const DOT = 0x2e;
const MAX_NAME_BYTES = 255;

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
