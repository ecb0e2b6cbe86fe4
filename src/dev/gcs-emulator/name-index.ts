/**
 * Object names kept sorted the way GCS lists them: by UTF-8 bytes, which is Unicode code point
 * order. JavaScript's `<` compares UTF-16 code units instead; the two differ only when a
 * surrogate (a code point above U+FFFF) meets a character in U+E000..U+FFFF, fixed up here
 * without allocating.
 */
export function compareNames(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) {
      const xs = x >= 0xd800 && x <= 0xdfff;
      const ys = y >= 0xd800 && y <= 0xdfff;
      if (xs !== ys && (x >= 0xe000 || y >= 0xe000)) return xs ? 1 : -1;
      return x - y;
    }
  }
  return a.length - b.length;
}

/** A sorted array of names with binary-search insert, delete and range starts (list is O(log n + page)). */
export class NameIndex {
  private names: string[] = [];

  get size(): number {
    return this.names.length;
  }

  at(i: number): string | undefined {
    return this.names[i];
  }

  /** First index whose name is >= `name`. */
  lowerBound(name: string): number {
    let lo = 0;
    let hi = this.names.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareNames(this.names[mid] as string, name) < 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** First index past every name that starts with `prefix` (names with a prefix are contiguous). */
  pastPrefix(prefix: string): number {
    let lo = this.lowerBound(prefix);
    let hi = this.names.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.names[mid] as string).startsWith(prefix)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  add(name: string): void {
    const i = this.lowerBound(name);
    if (this.names[i] !== name) this.names.splice(i, 0, name);
  }

  delete(name: string): void {
    const i = this.lowerBound(name);
    if (this.names[i] === name) this.names.splice(i, 1);
  }
}
