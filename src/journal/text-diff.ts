/**
 * Unified diffs of text (diff -u style) for `ledgerfs diff`, over jsdiff's line diff: the edit
 * script is the library's; only the hunk header is formatted here, because jsdiff's own patch
 * text adds a "====" banner and tab-suffixed names that `diff -u` and `patch` users do not expect.
 */
import { createRequire } from 'node:module';
import type * as Diff from 'diff';
import { printable } from '../core/index.js';

// jsdiff is required on the first diff (`ledgerfs diff`, `show`), not by every process that
// loads the journal: it is 19 modules, about 10 ms of a process's start.
let loaded: typeof Diff | undefined;
const jsdiff = (): typeof Diff => (loaded ??= createRequire(import.meta.url)('diff') as typeof Diff);

/** Past this many lines (or edits) the diff is not worth computing here; say so instead. */
const MAX_LINES = 50_000;
const MAX_EDITS = 5_000;

/** `start,count` as diff -u writes it: an empty side names the line before it, a count of 1 is implied. */
function range(start: number, count: number): string {
  if (count === 0) return `${start - 1},0`;
  return count === 1 ? `${start}` : `${start},${count}`;
}

function lineCount(text: string): number {
  if (text === '') return 0;
  const n = text.split('\n').length;
  return text.endsWith('\n') ? n - 1 : n;
}

/** A unified diff of two texts, or null when they are equal; a one-line note when too large. */
export function unifiedDiff(before: string, after: string, fromLabel: string, toLabel: string, context = 3): string | null {
  if (before === after) return null;
  // a name's own line breaks must not split the header (the CLI escapes each line it prints)
  const header = `--- ${printable(fromLabel)}\n+++ ${printable(toLabel)}\n`;
  const aLines = lineCount(before);
  const bLines = lineCount(after);
  if (aLines + bLines > MAX_LINES) return `${header}(too large to show: ${aLines} -> ${bLines} lines)\n`;
  const patch = jsdiff().structuredPatch(fromLabel, toLabel, before, after, undefined, undefined, { context, maxEditLength: MAX_EDITS });
  if (!patch) return `${header}(too many changes to show: ${aLines} -> ${bLines} lines)\n`;
  let out = header;
  for (const h of patch.hunks) {
    out += `@@ -${range(h.oldStart, h.oldLines)} +${range(h.newStart, h.newLines)} @@\n`;
    for (const line of h.lines) out += `${line}\n`;
  }
  return out;
}
