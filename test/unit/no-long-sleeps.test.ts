import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/*
 * Unit tests wait on events, polls or an injected clock, not on long sleeps (issue 14: no sleep
 * over 200 ms): a sleep long enough for a loaded machine is wasted on a quiet one, and one short
 * enough for a quiet machine fails on a loaded one. This finds the written-out forms: a timer
 * promise (`setTimeout(r, 1500)`, `sleep(700)`) with a literal delay.
 */
const MAX_MS = 200;
const SLEEP = /\b(?:setTimeout\(\s*(?:r|res|resolve)\s*,|sleep\(|delay\()\s*([\d_]+)\s*\)/g;

function longSleeps(text: string): string[] {
  const found: string[] = [];
  for (const m of text.matchAll(SLEEP)) if (Number((m[1] as string).replaceAll('_', '')) > MAX_MS) found.push(m[0]);
  return found;
}

describe(`unit tests sleep at most ${MAX_MS} ms at a time`, () => {
  it('finds a planted long sleep, and lets short ones and polls be', () => {
    expect(longSleeps('await new Promise((r) => setTimeout(r, 1500));\nawait sleep(700);\nawait sleep(1_000);')).toEqual(['setTimeout(r, 1500)', 'sleep(700)', 'sleep(1_000)']);
    expect(longSleeps('await new Promise((r) => setTimeout(r, 25));\nawait sleep(200);\nsetTimeout(() => child.kill(), 30_000);')).toEqual([]);
  });

  it('test/unit has none', () => {
    const dir = path.join(import.meta.dirname);
    const offenders = fs.readdirSync(dir)
      .filter((f) => f.endsWith('.ts') && f !== path.basename(import.meta.filename))
      .flatMap((f) => longSleeps(fs.readFileSync(path.join(dir, f), 'utf8')).map((s) => `${f}: ${s}`));
    expect(offenders).toEqual([]);
  });
});
