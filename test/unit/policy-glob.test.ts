import { describe, expect, it } from 'vitest';
import { compileGlob, compileGlobs, isBasenameOnly } from '../../src/config/glob.js';

describe('policy globs', () => {
  const cases: [string, string, boolean][] = [
    ['**/.env', '/.env', true],
    ['**/.env', '/a/b/.env', true],
    ['**/.env', '/a/.env/inside', true], // a matching directory covers its contents
    ['**/.env', '/a/.envx', false],
    ['.env', '/deep/down/.env', true], // no slash: any depth
    ['*.pem', '/k.pem', true],
    ['*.pem', '/a/b/.hidden.pem', true], // '*' matches dot files
    ['*.pem', '/a/pem', false],
    ['intake/**', '/intake', false],
    ['intake/**', '/intake/a/b', true],
    ['intake/**', '/x/intake/a', false], // a slash anchors the pattern
    ['/intake', '/intake/x', true],
    ['a/*/c', '/a/b/c', true],
    ['a/*/c', '/a/b/d/c', false],
    ['a/**/c', '/a/c', true],
    ['a/**/c', '/a/x/y/c', true],
    ['{a,b}.txt', '/x/b.txt', true],
    ['{a,b}.txt', '/x/c.txt', false],
    ['{a}.txt', '/x/{a}.txt', true], // no comma: the braces are literal, as in sh and gitignore
    ['{a}.txt', '/x/a.txt', false],
    ['[!a]x', '/bx', true],
    ['[!a]x', '/ax', false],
    ['[a-c]x', '/bx', true],
    ['file\\*', '/file*', true],
    ['file\\*', '/filex', false],
    ['?.md', '/a.md', true],
    ['?.md', '/ab.md', false],
    ['a.b', '/aXb', false], // '.' is literal
  ];
  it.each(cases)('%s vs %s -> %s', (glob, path, want) => {
    expect(compileGlob(glob).test(path)).toBe(want);
  });

  it('anchors root-level patterns at the root and escapes the root path', () => {
    const re = compileGlob('notes/**', '/projects/Wilson*MVA');
    expect(re.test('/projects/Wilson*MVA/notes/a')).toBe(true);
    expect(re.test('/projects/WilsonXMVA/notes/a')).toBe(false);
    expect(compileGlob('*.pdf', '/p').test('/p/x/y.pdf')).toBe(true);
    expect(compileGlob('*.pdf', '/p').test('/q/y.pdf')).toBe(false);
  });

  it('combines patterns into one RegExp, null for none', () => {
    expect(compileGlobs([])).toBeNull();
    const re = compileGlobs([{ glob: '**/.env', base: '/' }, { glob: 'secret', base: '/r' }]) as RegExp;
    expect(re.test('/r/x/secret')).toBe(true);
    expect(re.test('/q/.env')).toBe(true);
    expect(re.test('/q/secret')).toBe(false);
  });

  it('rejects broken patterns with a reason', () => {
    expect(() => compileGlob('a/[b')).toThrow(/without a closing "\]"/);
    expect(() => compileGlob('{a')).toThrow(/without a closing "}"/);
    expect(() => compileGlob('a/../b')).toThrow(/"\.\."/);
    expect(() => compileGlob('/')).toThrow(/matches nothing/);
    expect(() => compileGlob('{a/b,c}')).toThrow(/not allowed inside/);
  });

  it('knows which patterns only look at names', () => {
    expect(isBasenameOnly('**/.env')).toBe(true);
    expect(isBasenameOnly('*.pem')).toBe(true);
    expect(isBasenameOnly('intake/**')).toBe(false);
    expect(isBasenameOnly('/x')).toBe(false);
  });
});
