/**
 * Globs for `hide` and `readonly`, compiled once to one RegExp per root (no dependency: the
 * syntax is small and fixed, and Node 20's path.matchesGlob is experimental).
 *
 * Syntax (gitignore-like):
 *   *        any characters except '/' (dot files included)
 *   ?        one character except '/'
 *   [abc] [a-z] [!abc]   one character of / not of a set (never '/')
 *   {a,b}    alternatives (within one path component); `{a}`, with no comma, is literal
 *   **       as a whole component: zero or more components
 *   \x       the character x itself
 * A pattern without '/' (other than a trailing one) matches at any depth: `*.pem` is `**\/*.pem`.
 * A pattern with a '/' is anchored where it is given (the view root for top-level lists, the
 * root's path for a root's lists); a leading '/' only says so explicitly.
 * A pattern that matches a directory covers everything below it.
 */

/** Escape a literal path so it can be used as a glob prefix. */
export function escapeGlob(literal: string): string {
  return literal.replace(/[*?[\]{}\\]/g, (c) => '\\' + c);
}

function escapeRe(c: string): string {
  return /[\\^$.*+?()[\]{}|/]/.test(c) ? '\\' + c : c;
}

/** Regex source for one path component pattern (no '/'). */
function componentToRe(seg: string, pattern: string): string {
  let re = '';
  for (let i = 0; i < seg.length; i++) {
    const c = seg[i] as string;
    if (c === '\\') {
      i++;
      if (i >= seg.length) throw new Error(`glob ${JSON.stringify(pattern)} ends with a lone "\\"`);
      re += escapeRe(seg[i] as string);
    } else if (c === '*') {
      while (seg[i + 1] === '*') i++; // "a**b" inside a component is just "*"
      re += '[^/]*';
    } else if (c === '?') {
      re += '[^/]';
    } else if (c === '[') {
      let j = i + 1;
      let negate = false;
      if (seg[j] === '!' || seg[j] === '^') {
        negate = true;
        j++;
      }
      let body = '';
      let first = true;
      for (; j < seg.length && (seg[j] !== ']' || first); j++) {
        const d = seg[j] as string;
        first = false;
        if (d === '\\' && j + 1 < seg.length) body += '\\' + seg[++j];
        else body += d === '-' ? '-' : escapeRe(d);
      }
      if (j >= seg.length) throw new Error(`glob ${JSON.stringify(pattern)} has a "[" without a closing "]"`);
      re += negate ? `[^/${body}]` : `(?!/)[${body}]`;
      i = j;
    } else if (c === '{') {
      let depth = 1;
      let j = i + 1;
      const alts: string[] = [];
      let start = j;
      for (; j < seg.length; j++) {
        const d = seg[j];
        if (d === '\\') j++;
        else if (d === '{') depth++;
        else if (d === '}' && --depth === 0) break;
        else if (d === ',' && depth === 1) {
          alts.push(seg.slice(start, j));
          start = j + 1;
        }
      }
      if (j >= seg.length) throw new Error(`glob ${JSON.stringify(pattern)} has a "{" without a closing "}"`);
      alts.push(seg.slice(start, j));
      if (alts.length === 1) {
        // as in sh, gitignore and picomatch: braces without a comma are the characters themselves
        re += escapeRe('{');
        continue;
      }
      re += '(?:' + alts.map((a) => componentToRe(a, pattern)).join('|') + ')';
      i = j;
    } else {
      re += escapeRe(c);
    }
  }
  return re;
}

/** Split on '/' outside of {...} and [...] and escapes; refuses '/' inside them. */
function splitComponents(p: string, pattern: string): string[] {
  const out: string[] = [];
  let cur = '';
  let braces = 0;
  let bracket = false;
  for (let i = 0; i < p.length; i++) {
    const c = p[i] as string;
    if (c === '\\' && i + 1 < p.length) {
      cur += c + p[++i];
      continue;
    }
    if (bracket) {
      if (c === ']') bracket = false;
    } else if (c === '[') bracket = true;
    else if (c === '{') braces++;
    else if (c === '}') braces = Math.max(0, braces - 1);
    if (c === '/') {
      if (braces > 0 || bracket) throw new Error(`glob ${JSON.stringify(pattern)}: "/" is not allowed inside {...} or [...]`);
      out.push(cur);
      cur = '';
    } else cur += c;
  }
  out.push(cur);
  return out;
}

/**
 * Regex source matching a view path *relative to the view root, without the leading '/'*, for
 * one pattern. `base` is the glob-escaped directory the pattern is relative to ('' = view root).
 */
export function globToRe(pattern: string, base = ''): string {
  let p = pattern.trim();
  const anchored = p.startsWith('/');
  p = p.replace(/^\/+/, '').replace(/\/+$/, '');
  if (p === '') throw new Error(`glob ${JSON.stringify(pattern)} matches nothing`);
  if (!anchored && !p.includes('/')) p = '**/' + p;
  if (base !== '') p = base + '/' + p;
  const segs = splitComponents(p, pattern).filter((s, i, a) => !(s === '**' && a[i - 1] === '**'));
  if (segs.some((s) => s === '' || s === '.' || s === '..')) {
    throw new Error(`glob ${JSON.stringify(pattern)} has an empty, "." or ".." component`);
  }
  let re = '';
  let afterGlobstar = false;
  segs.forEach((seg, i) => {
    const last = i === segs.length - 1;
    if (seg === '**') {
      if (i === 0) re += last ? '.*' : '(?:.*/)?';
      else re += last ? '/.*' : '/(?:.*/)?';
      afterGlobstar = true;
    } else {
      if (i > 0 && !afterGlobstar) re += '/';
      re += componentToRe(seg, pattern);
      afterGlobstar = false;
    }
  });
  return re;
}

/**
 * One RegExp testing absolute view paths ("/a/b") against all patterns: a path matches if it
 * or one of its ancestors matches a pattern (so a hidden directory hides its contents).
 * `base` is the view directory the patterns are relative to ("/" or a root's path).
 * null when there are no patterns, so the hot path can skip the test.
 */
export function compileGlobs(patterns: readonly { glob: string; base: string }[]): RegExp | null {
  if (patterns.length === 0) return null;
  const alts = patterns.map(({ glob, base }) => globToRe(glob, base === '/' ? '' : escapeGlob(base.slice(1))));
  return new RegExp(`^/(?:${alts.join('|')})(?:/.*)?$`, 's');
}

/** Compile one pattern (validation for the config schema, and tests). */
export function compileGlob(pattern: string, base = '/'): RegExp {
  return compileGlobs([{ glob: pattern, base }]) as RegExp;
}

/**
 * True if the pattern only looks at the last component (`**\/NAME`), so moving a directory
 * cannot change what it matches below that directory: rename then needs no subtree walk.
 */
export function isBasenameOnly(pattern: string): boolean {
  let p = pattern.trim();
  if (p.startsWith('/')) return false;
  p = p.replace(/\/+$/, '');
  if (p.startsWith('**/')) p = p.slice(3);
  while (p.startsWith('**/')) p = p.slice(3);
  return !p.includes('/') && p !== '**';
}
