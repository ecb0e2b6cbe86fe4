import { describe, expect, it } from 'vitest';
import { textLine } from '../../src/core/log.js';

/*
 * `--log-format text` (the default on a terminal, and what `ledgerfs run --log-level warn` shows
 * the operator) prints each refusal with the path the refused program chose. An ESC in it was
 * printed raw (only whitespace, quotes and = made a value quoted): the program could redraw the
 * operator's terminal. A newline inside a message must not start a line of its own either.
 */
describe('text log lines', () => {
  it('one line, with no character a terminal would act on', () => {
    const json = JSON.stringify({ level: 40, time: Date.UTC(2026, 10, 26), msg: 'denied by policy', op: 'create', path: '/rw/a\x1b[1A\x1b[2K.exe', reason: 'x\n2026 INFO forged', cmd: 'c1\u009b2J' });
    const line = textLine(json);
    expect(line.endsWith('\n')).toBe(true);
    expect(line.slice(0, -1)).not.toMatch(/[\x00-\x08\x0a-\x1f\x7f-\x9f]/);
    expect(line).toContain('path=/rw/a\\x1b[1A\\x1b[2K.exe');
    expect(line).toContain('2026-11-26T00:00:00.000Z WARN  denied by policy op=create');
  });

  it('plain values stay as they were', () => {
    expect(textLine(JSON.stringify({ level: 30, time: 0, msg: 'mounted', mountpoint: '/mnt/ws', n: 3 }))).toBe('1970-01-01T00:00:00.000Z INFO  mounted mountpoint=/mnt/ws n=3\n');
  });
});
