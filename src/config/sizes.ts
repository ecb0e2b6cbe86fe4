/**
 * Byte sizes as people write them in a mount file: `1024`, `512K`, `50MiB`, `2GB`, `1.5GiB`.
 * Like dd and df: KiB/MiB/GiB/TiB and bare K/M/G/T are powers of 1024; KB/MB/GB/TB are powers
 * of 1000. Units are case-insensitive; a space between number and unit is allowed.
 */

const UNITS: Record<string, number> = {
  '': 1, b: 1,
  k: 1024, kib: 1024, kb: 1000,
  m: 1024 ** 2, mib: 1024 ** 2, mb: 1000 ** 2,
  g: 1024 ** 3, gib: 1024 ** 3, gb: 1000 ** 3,
  t: 1024 ** 4, tib: 1024 ** 4, tb: 1000 ** 4,
};

const SIZE_RE = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i;

/** Bytes for a size, or a sentence saying what was expected. */
export function parseSize(input: unknown): number | { error: string } {
  if (typeof input === 'number') {
    if (Number.isSafeInteger(input) && input >= 0) return input;
    return { error: `expected a whole number of bytes >= 0 or a size like "50MiB", got ${input}` };
  }
  if (typeof input !== 'string') {
    return { error: `expected a size like 1024, "50MiB" or "2GB", got ${describeValue(input)}` };
  }
  const m = SIZE_RE.exec(input.trim());
  const unit = m ? UNITS[(m[2] ?? '').toLowerCase()] : undefined;
  if (!m || unit === undefined) {
    return { error: `expected a size like 1024, "50MiB" or "2GB" (units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), got ${JSON.stringify(input)}` };
  }
  const bytes = Math.floor(Number(m[1]) * unit);
  if (!Number.isSafeInteger(bytes)) return { error: `size ${JSON.stringify(input)} is too large` };
  return bytes;
}

const BINARY = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** "50 MiB", "1.5 GiB", "312 B": exact multiples without decimals, else one decimal. */
export function formatSize(bytes: number): string {
  let v = bytes;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < BINARY.length - 1) {
    v /= 1024;
    i++;
  }
  const text = Number.isInteger(v) ? String(v) : v.toFixed(1);
  return `${text} ${BINARY[i]}`;
}

/** A value as an error message shows it: strings quoted, the rest by type. */
export function describeValue(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (v === null) return 'null';
  if (typeof v === 'string') return JSON.stringify(v);
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return 'a list';
  return `a ${typeof v === 'object' ? 'mapping' : typeof v}`;
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** Milliseconds for "90s", "10m", "24h", "7d", "2w" (also combined: "1h30m"), or a sentence saying what was expected. */
export function parseDurationMs(input: unknown): number | { error: string } {
  const s = typeof input === 'string' ? input.trim() : '';
  let total = 0;
  let consumed = 0;
  for (const m of s.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/g)) {
    total += Number(m[1]) * (DURATION_UNITS[m[2] as string] as number);
    consumed += m[0].length;
  }
  if (consumed === 0 || consumed !== s.length) return { error: `expected a duration like "30m", "24h", "7d" or "4w", got ${JSON.stringify(input)}` };
  return total;
}
