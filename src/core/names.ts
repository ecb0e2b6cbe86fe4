/*
 * Names are bytes on Linux; inside the daemon they are strings. A byte that is not part of valid
 * UTF-8 is the lone surrogate U+DC80+byte (PEP 383's "surrogateescape", as Python's os module
 * does), so every name round-trips exactly and a name of valid UTF-8 is itself. The kernel
 * binding (native/ledgerfs_names.h) and the local store convert at their edges; nothing between
 * them needs to know. JSON keeps a lone surrogate as `\udcXX`, so journal records carry them as is.
 */

/** a lone U+DC80..U+DCFF (the `u` flag skips the low half of a surrogate pair) */
const ESCAPE = /[\udc80-\udcff]/u;

/** Whether `s` holds a byte that is not UTF-8 (it then needs Buffer paths for the OS). */
export function hasRawBytes(s: string): boolean {
  return ESCAPE.test(s);
}

/** The bytes `s` stands for. */
export function nameBytes(s: string): Buffer {
  if (!ESCAPE.test(s)) return Buffer.from(s, 'utf8');
  const parts: Buffer[] = [];
  let from = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        i++;
        continue;
      }
    }
    if (c >= 0xdc80 && c <= 0xdcff) {
      if (i > from) parts.push(Buffer.from(s.slice(from, i), 'utf8'));
      parts.push(Buffer.of(c - 0xdc00));
      from = i + 1;
    }
  }
  if (from < s.length) parts.push(Buffer.from(s.slice(from), 'utf8'));
  return Buffer.concat(parts);
}

/** A path for Node's fs: the string itself, or its bytes when it holds an escape. */
export function osPath(s: string): string | Buffer {
  return ESCAPE.test(s) ? nameBytes(s) : s;
}

const strict = new TextDecoder('utf-8', { fatal: true });

/** length of the valid UTF-8 sequence at b[i] (>= 0x80), or 0 (strict: as Python's decoder) */
function seqLength(b: Uint8Array, i: number): number {
  const c = b[i] as number;
  const cont = (k: number) => i + k < b.length && ((b[i + k] as number) & 0xc0) === 0x80;
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    if (!cont(1) || !cont(2)) return 0;
    const c1 = b[i + 1] as number;
    if ((c === 0xe0 && c1 < 0xa0) || (c === 0xed && c1 >= 0xa0)) return 0;
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    const c1 = b[i + 1] as number;
    if ((c === 0xf0 && c1 < 0x90) || (c === 0xf4 && c1 >= 0x90)) return 0;
    return 4;
  }
  return 0;
}

/** The string of a name's bytes (each byte outside valid UTF-8 as its escape). */
export function nameFromBytes(b: Uint8Array): string {
  try {
    return strict.decode(b);
  } catch {
    // not UTF-8: below
  }
  let out = '';
  let from = 0;
  for (let i = 0; i < b.length; ) {
    if ((b[i] as number) < 0x80) {
      i++;
      continue;
    }
    const k = seqLength(b, i);
    if (k) {
      i += k;
      continue;
    }
    out += Buffer.from(b.buffer, b.byteOffset + from, i - from).toString('utf8') + String.fromCharCode(0xdc00 + (b[i] as number));
    from = ++i;
  }
  return out + Buffer.from(b.buffer, b.byteOffset + from, b.length - from).toString('utf8');
}

/** Whether a string Node's fs decoded may have lost bytes (it writes U+FFFD for each). */
export function mayHaveLostBytes(s: string): boolean {
  return s.includes('\ufffd');
}

const ESCAPES = /[\udc80-\udcff]/gu;
/**
 * What a terminal would act on rather than show: C0 controls but tab (a newline or carriage
 * return starts a forged line, ESC a cursor move that erases one), DEL, C1 controls (U+009B is a
 * CSI to some terminals) and the bidirectional overrides that reorder what is shown.
 */
const CONTROLS = /[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/gu;
const ANY = /[\udc80-\udcff\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/u;

/**
 * One line for people: each byte that is not UTF-8 as `\xHH` (what `ls -b` and Python's repr
 * show), and each character a terminal would act on (a newline, ESC, a bidi override) as `\xHH`
 * or `\u{HHHH}`, so that a name chosen by a sandboxed program cannot forge or erase lines of
 * what the operator reviews (`log`, `diff`, `show`, `rollback`). Give it one line at a time:
 * the caller adds the line break. Text output only; `--json` keeps the escape (`"\udcff"`),
 * which Python's json and os.fsencode read back as the byte.
 */
export function printable(s: string): string {
  if (!ANY.test(s)) return s;
  return s
    .replace(ESCAPES, (c) => `\\x${(c.charCodeAt(0) - 0xdc00).toString(16).padStart(2, '0')}`)
    .replace(CONTROLS, (c) => {
      const n = c.charCodeAt(0);
      return n <= 0xff ? `\\x${n.toString(16).padStart(2, '0')}` : `\\u{${n.toString(16)}}`;
    });
}

/** printable() of each line of a text, its line breaks kept. */
export function printableLines(s: string): string {
  return s.split('\n').map(printable).join('\n');
}
