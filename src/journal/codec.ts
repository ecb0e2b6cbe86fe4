import { crc32c } from './crc32c.js';
import { recordSchema, type JournalRecord } from './record.js';

/*
 * One record per line: "<crc32c of the JSON, 8 hex digits> <JSON>\n". JSON never contains a raw
 * newline, so a line is a frame; the checksum catches a torn or damaged line. Text lines keep the
 * journal readable with less/grep when something goes badly wrong.
 */

const NL = 0x0a;
const SPACE = 0x20;

/** One line, as bytes: the JSON is encoded once, for the checksum and the write alike. */
export function encodeRecord(rec: JournalRecord): Buffer {
  const json = JSON.stringify(rec);
  const len = Buffer.byteLength(json, 'utf8');
  const line = Buffer.allocUnsafe(len + 10);
  line.write(json, 9, 'utf8');
  line.write(crc32c(line, 9, 9 + len).toString(16).padStart(8, '0'), 0, 'latin1');
  line[8] = SPACE;
  line[9 + len] = NL;
  return line;
}

export interface DecodedLine {
  record: JournalRecord;
  /** byte offset of the line in its segment */
  offset: number;
  /** byte length including the newline */
  length: number;
}

export interface LineProblem {
  offset: number;
  reason: string;
}

export interface ScannedSegment {
  lines: DecodedLine[];
  /** damaged lines followed by good ones: real corruption, never cut automatically */
  problems: LineProblem[];
  /** bytes after the last good line that do not form good lines: a write cut short by a crash */
  tornTail: { offset: number; bytes: number; reason: string } | null;
}

function decodeLine(buf: Buffer, start: number, end: number): JournalRecord | string {
  if (end - start < 10 || buf[start + 8] !== SPACE) return 'malformed line';
  const want = parseInt(buf.toString('latin1', start, start + 8), 16);
  if (!Number.isFinite(want)) return 'malformed checksum';
  if (crc32c(buf, start + 9, end) !== want) return 'checksum mismatch';
  let value: unknown;
  try {
    value = JSON.parse(buf.toString('utf8', start + 9, end));
  } catch {
    return 'checksum matches but the JSON does not parse';
  }
  const parsed = recordSchema().safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return `not a record this version understands (${issue ? `${issue.path.join('.')}: ${issue.message}` : 'invalid'})`;
  }
  return parsed.data;
}

/** Decode a whole segment, separating a torn tail from damage in the middle. */
export function scanSegment(buf: Buffer): ScannedSegment {
  const lines: DecodedLine[] = [];
  const bad: LineProblem[] = [];
  let pos = 0;
  let goodEnd = 0;
  while (pos < buf.length) {
    const nl = buf.indexOf(NL, pos);
    if (nl < 0) {
      bad.push({ offset: pos, reason: 'incomplete last line' });
      break;
    }
    const r = decodeLine(buf, pos, nl);
    if (typeof r === 'string') {
      bad.push({ offset: pos, reason: r });
    } else {
      lines.push({ record: r, offset: pos, length: nl + 1 - pos });
      goodEnd = nl + 1;
    }
    pos = nl + 1;
  }
  const problems = bad.filter((p) => p.offset < goodEnd);
  const tail = bad.filter((p) => p.offset >= goodEnd);
  return {
    lines,
    problems,
    tornTail: tail.length > 0 ? { offset: goodEnd, bytes: buf.length - goodEnd, reason: (tail[0] as LineProblem).reason } : null,
  };
}
