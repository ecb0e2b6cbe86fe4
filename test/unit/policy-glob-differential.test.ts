/**
 * The hide/readonly glob dialect (src/config/glob.ts) checked against picomatch, a matcher used by
 * most of the JavaScript tool chain: for random patterns and paths in the shared subset of the two
 * dialects, both must agree. Our two rules that picomatch does not have are spelled out for it: a
 * pattern without '/' matches at any depth ('**\/' in front), and a match of a directory covers
 * everything below it (any ancestor matching counts); and, as in gitignore, a trailing '/**' is what
 * is inside a directory, not the directory itself.
 */
import fc from 'fast-check';
import picomatch from 'picomatch';
import { describe, expect, it } from 'vitest';
import { compileGlob } from '../../src/config/glob.js';

const RUNS = 2_000;

/** One component of a pattern: literals, wildcards, sets and brace alternatives. */
const atom = fc.constantFrom('a', 'b', '.', 'x', '*', '?', '[ab]', '[!a]', '[a-c]', '{a,b}', '{x,ab}', '{a}', '{a,}', '{[ab],x*}', '\\*');
const component = fc.oneof(
  { weight: 6, arbitrary: fc.array(atom, { minLength: 1, maxLength: 4 }).map((a) => a.join('')) },
  { weight: 1, arbitrary: fc.constant('**') },
);
const pattern = fc
  .tuple(fc.boolean(), fc.array(component, { minLength: 1, maxLength: 4 }))
  .map(([anchored, comps]) => (anchored ? '/' : '') + comps.join('/'))
  // a component of '.' alone is refused by our dialect (covered by the refusal tests), and one that
  // can be empty ('{a,}' alone) is outside it: a path has no empty component
  .filter((p) => !p.split('/').some((c) => c === '.' || c === '..' || c === '{a,}'));

/** Path components in the shared alphabet (dot files included, '.' and '..' never). */
const name = fc
  .array(fc.constantFrom('a', 'b', 'c', 'x', '.', '*', '{', '}', ','), { minLength: 1, maxLength: 4 })
  .map((a) => a.join(''))
  .filter((n) => n !== '.' && n !== '..');
const viewPath = fc.array(name, { minLength: 1, maxLength: 5 }).map((c) => '/' + c.join('/'));

function picomatchSays(glob: string, p: string): boolean {
  let g = glob.replace(/^\/+/, '');
  if (!glob.startsWith('/') && !g.includes('/')) g = `**/${g}`;
  // gitignore's reading, ours: 'dir/**' is what is inside dir, not dir itself (picomatch takes both)
  if (g.endsWith('/**')) g += '/*';
  // picomatch 4 spells a negated set only '[^...]'; it reads '[!a]' as something else
  g = g.replaceAll('[!', '[^');
  // ours: '**' is a globstar only as a whole component; inside one ('a**b') it is '*'
  g = g
    .split('/')
    .map((c) => (c === '**' ? c : c.replace(/(?<!\\)\*{2,}/g, '*')))
    .join('/');
  const isMatch = picomatch(g, { dot: true });
  const comps = p.slice(1).split('/');
  for (let i = 1; i <= comps.length; i++) if (isMatch(comps.slice(0, i).join('/'))) return true;
  return false;
}

describe('policy globs against picomatch (differential)', () => {
  it(`agree on ${RUNS} random patterns and paths`, () => {
    fc.assert(
      fc.property(pattern, fc.array(viewPath, { minLength: 1, maxLength: 8 }), (glob, paths) => {
        const ours = compileGlob(glob);
        for (const p of paths) expect({ glob, p, match: ours.test(p) }).toEqual({ glob, p, match: picomatchSays(glob, p) });
      }),
      { numRuns: RUNS, seed: Number(process.env.GLOB_SEED ?? 20261125) },
    );
  });

  it('agree on the hide lists the presets ship', () => {
    const globs = ['**/.env', '**/.env.*', '*.pem', '**/id_rsa*', '.git/**', 'secrets/**', '/intake', 'a/**/c'];
    const paths = ['/.env', '/a/.env.local', '/k.pem', '/x/.ssh/id_rsa.pub', '/.git/config', '/secrets', '/secrets/x', '/intake/y', '/a/c', '/a/b/c', '/b/a/c'];
    for (const g of globs) for (const p of paths) expect([g, p, compileGlob(g).test(p)]).toEqual([g, p, picomatchSays(g, p)]);
  });
});
