import { execFileSync } from 'node:child_process';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encodeRecord } from '../../src/journal/codec.js';
import { hasRawBytes, nameBytes, nameFromBytes, osPath, printable } from '../../src/core/index.js';

/*
 * Names as strings with PEP 383 escapes (src/core/names.ts): the same mapping as Python's
 * os.fsdecode/os.fsencode (surrogateescape), so the daemon's strings, Python's, and the journal's
 * JSON all say the same bytes.
 */
describe('names as bytes', () => {
  it('round-trips any bytes exactly', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (b) => {
        const s = nameFromBytes(b);
        expect(nameBytes(s).equals(Buffer.from(b))).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('decodes as Python does (surrogateescape), sequences strict: no overlongs, no encoded surrogates', () => {
    const cases = ['61ff', '612dfe', '62e777f0', 'c3a9', 'e697a5e69cac', 'eda080', 'edb280', 'efbfbd', 'c080', 'e08080', 'f4908080', 'f09f9880', 'f09f92', 'ff', ''];
    const py = execFileSync('python3', ['-c', `import sys, json\nprint(json.dumps([bytes.fromhex(h).decode('utf-8', 'surrogateescape') for h in sys.argv[1:]]))`, ...cases], { encoding: 'utf8' });
    const want = JSON.parse(py) as string[];
    expect(cases.map((h) => nameFromBytes(Buffer.from(h, 'hex')))).toEqual(want);
    for (const s of want) expect(nameBytes(s).toString('hex')).toBe(cases[want.indexOf(s)]);
  });

  it('leaves valid UTF-8 alone: no Buffer for the OS, no escapes (a pair whose low half is U+DC80 is not one)', () => {
    for (const s of ['plain', 'é日本', '\ud83d\udc80', 'a\ufffdb']) {
      expect(hasRawBytes(s)).toBe(false);
      expect(osPath(s)).toBe(s);
      expect(nameFromBytes(Buffer.from(s))).toBe(s);
    }
    expect(osPath('/x/a-\udcff')).toEqual(Buffer.from('2f782f612dff', 'hex'));
  });

  it('prints escapes as \\xHH and keeps them through a journal record', () => {
    expect(printable('rename /a-\udcff -> /b-\udce7w\udcf0 é')).toBe('rename /a-\\xff -> /b-\\xe7w\\xf0 é');
    const line = encodeRecord({ path: '/a-\udcff' } as never).toString('utf8');
    expect(line).toContain('"/a-\\udcff"');
    expect(JSON.parse(line.slice(line.indexOf('{'))).path).toBe('/a-\udcff');
  });
});
