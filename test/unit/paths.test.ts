import { describe, expect, it } from 'vitest';
import { checkPath, VfsError } from '../../src/core/index.js';

/** checkPath as it was first written (split into components): the definition the fast one keeps */
function reference(path: string): string {
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

const outcome = (f: (p: string) => string, p: string): string => {
  try {
    return `ok ${f(p)}`;
  } catch (err) {
    return err instanceof VfsError ? `${err.code} ${err.reason}` : `other ${String(err)}`;
  }
};

describe('checkPath', () => {
  it('answers every path as the component-splitting definition does', () => {
    const cases = [
      '/', '', 'a', 'a/b', '/a', '/a/b/c', '/a/', '//', '/a//b', '/.', '/..', '/a/./b', '/a/../b', '/a/.', '/a/..',
      '/...', '/.a', '/a.', '/..a', '/a..', '/.../b', '/a\0b', '/\0', '/é', '/日本語/ファイル',
      `/${'x'.repeat(255)}`, `/${'x'.repeat(256)}`, `/a/${'x'.repeat(256)}/b`, `/${'é'.repeat(127)}`, `/${'é'.repeat(128)}`,
      `/${'日'.repeat(85)}`, `/${'日'.repeat(86)}`, `/${'😀'.repeat(63)}`, `/${'😀'.repeat(64)}`, `/${'\ud800'.repeat(86)}`,
      `/ok/${'日'.repeat(86)}/..`, '/a/b/', '/./a',
    ];
    // and random ones over the characters that matter
    const alphabet = ['/', '.', 'a', 'é', '日', '😀', '\0'];
    let seed = 17;
    const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    for (let k = 0; k < 3000; k++) {
      let p = rnd(4) === 0 ? '' : '/';
      const len = rnd(12);
      for (let i = 0; i < len; i++) p += alphabet[rnd(alphabet.length)];
      cases.push(p);
    }
    for (const p of cases) expect(outcome(checkPath, p), JSON.stringify(p)).toBe(outcome(reference, p));
  });
});
