/**
 * Unified diffs of text (diff -u style), from a Myers shortest edit script over lines.
 * Used by `ledgerfs diff` for text files the journal holds both sides of.
 */

type Edit = { kind: ' ' | '-' | '+'; line: string };

/** Past this many lines (or edits) the diff is not worth computing here; say so instead. */
const MAX_LINES = 50_000;
const MAX_EDITS = 5_000;

function splitLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  else lines[lines.length - 1] += '\n\\ No newline at end of file';
  return lines;
}

/** Myers' O((N+M)D) algorithm, keeping one V array per step for the backtrack. */
function editScript(a: string[], b: string[]): Edit[] | null {
  const n = a.length;
  const m = b.length;
  const max = Math.min(n + m, MAX_EDITS);
  const off = max + 1;
  let v = new Int32Array(2 * max + 3);
  const trace: Int32Array[] = [];
  let found = false;
  for (let d = 0; d <= max && !found; d++) {
    trace.push(v.slice());
    const next = v.slice();
    for (let k = -d; k <= d; k += 2) {
      let x: number;
      if (k === -d || (k !== d && (v[off + k - 1] as number) < (v[off + k + 1] as number))) x = v[off + k + 1] as number;
      else x = (v[off + k - 1] as number) + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      next[off + k] = x;
      if (x >= n && y >= m) {
        found = true;
        break;
      }
    }
    v = next;
  }
  if (!found) return null;
  // backtrack
  const edits: Edit[] = [];
  let x = n;
  let y = m;
  for (let d = trace.length - 1; d >= 0; d--) {
    const vd = trace[d] as Int32Array;
    const k = x - y;
    let prevK: number;
    if (k === -d || (k !== d && (vd[off + k - 1] as number) < (vd[off + k + 1] as number))) prevK = k + 1;
    else prevK = k - 1;
    const prevX = d === 0 ? 0 : (vd[off + prevK] as number);
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      edits.push({ kind: ' ', line: a[x - 1] as string });
      x--;
      y--;
    }
    if (d > 0) {
      if (x === prevX) edits.push({ kind: '+', line: b[y - 1] as string });
      else edits.push({ kind: '-', line: a[x - 1] as string });
    }
    x = prevX;
    y = prevY;
  }
  return edits.reverse();
}

/** A unified diff of two texts, or null when they are equal; a one-line note when too large. */
export function unifiedDiff(before: string, after: string, fromLabel: string, toLabel: string, context = 3): string | null {
  if (before === after) return null;
  const a = splitLines(before);
  const b = splitLines(after);
  const header = `--- ${fromLabel}\n+++ ${toLabel}\n`;
  if (a.length + b.length > MAX_LINES) return `${header}(too large to show: ${a.length} -> ${b.length} lines)\n`;
  const edits = editScript(a, b);
  if (!edits) return `${header}(too many changes to show: ${a.length} -> ${b.length} lines)\n`;
  let out = header;
  let i = 0;
  while (i < edits.length) {
    while (i < edits.length && (edits[i] as Edit).kind === ' ') i++;
    if (i >= edits.length) break;
    let start = Math.max(0, i - context);
    let end = i;
    // extend the hunk while changes are within 2*context of each other
    for (;;) {
      while (end < edits.length && (edits[end] as Edit).kind !== ' ') end++;
      let j = end;
      while (j < edits.length && (edits[j] as Edit).kind === ' ' && j - end < 2 * context) j++;
      if (j < edits.length && (edits[j] as Edit).kind !== ' ') {
        end = j;
        continue;
      }
      end = Math.min(edits.length, end + context);
      break;
    }
    let aLine = 1;
    let bLine = 1;
    for (let t = 0; t < start; t++) {
      const e = edits[t] as Edit;
      if (e.kind !== '+') aLine++;
      if (e.kind !== '-') bLine++;
    }
    const hunk = edits.slice(start, end);
    const aCount = hunk.filter((e) => e.kind !== '+').length;
    const bCount = hunk.filter((e) => e.kind !== '-').length;
    out += `@@ -${aCount === 0 ? aLine - 1 : aLine}${aCount === 1 ? '' : `,${aCount}`} +${bCount === 0 ? bLine - 1 : bLine}${bCount === 1 ? '' : `,${bCount}`} @@\n`;
    for (const e of hunk) out += `${e.kind}${e.line}\n`;
    i = end;
    start = end;
  }
  return out;
}
