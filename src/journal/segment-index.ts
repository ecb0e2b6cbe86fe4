import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { scanSegment } from './codec.js';
import { buildHistory, type History } from './history.js';
import { listSegments, stateLayout, type SegmentFile } from './layout.js';
import { checkSegments, type JournalContents, type LocatedRecord, readIntactJournal, segmentFacts, type SegmentFacts } from './reader.js';
import type { StartRecord } from './record.js';

/*
 * The journal index: journal-index.json in the state directory (beside journal/, so what reads or
 * ships journal/ sees segments only), a cache of what each segment holds (sessions, path
 * prefixes, seq and time ranges, the seqs its records refer to) and of the facts the integrity
 * checks need (segmentFacts), so `log --session`, `rollback --session` and the like read only the
 * segments that can matter to them instead of the whole journal.
 *
 * The segments stay the truth. An entry is used only while its segment's file is the one it was
 * made from (same size, mtime, ctime and inode: an append, a gc rewrite or an edit changes one of
 * them; ctime cannot be set back by a user), else that segment is scanned again. A damaged or
 * foreign index file (checksum, version) is dropped and rebuilt. The index is local and never
 * shipped: the GCS mirror copies segments only, and every host rebuilds its own.
 */

const INDEX_VERSION = 4;
/** path prefixes kept per segment: '/', '/a', '/a/b' (a deeper --path is looked up by its first two parts) */
const PATH_DEPTH = 2;
/** more prefixes than this in a segment: keep them one level shallower (the index stays small enough
 * to read in a few ms; a --path query then reads some segments it did not need) */
const MAX_PATHS = 64;
/** a segment changed this recently may change again within the file system's timestamp granularity
 * without its mtime moving: not cached yet (git's "racy clean" problem) */
const RACY_MS = 2000;

export interface IndexEntry {
  name: string;
  size: number;
  mtimeMs: number;
  ctimeMs: number;
  ino: number;
  facts: SegmentFacts;
  /** smallest and largest seq of the segment's op records */
  seq: [number, number] | null;
  /** earliest and latest time of any of its records */
  time: [number, number] | null;
  /** sessions of its op records */
  sessions: string[];
  /** sessions of its rollback records (intent, restored, end) */
  rollbacks: string[];
  /** every prefix up to `pathDepth` parts of the paths its operations name */
  paths: string[];
  pathDepth: number;
  /** seqs its records refer to that are not its own operations (outcomes of an operation begun
   * in an earlier segment, a rollback's targets, conflicts) */
  refs: number[];
  /** holds what every history needs: undo mutations, rollback records, conflicts */
  always: boolean;
  starts: StartRecord[];
  /** sessions of operations before the segment's first start record (all of them if it has none) */
  beforeStart: string[];
}

interface IndexFile {
  version: number;
  entries: IndexEntry[];
}

export interface JournalQuery {
  session?: string;
  /** operations naming this path or something below it */
  path?: string;
  /** operations from this seq on */
  fromSeq?: number;
  /** operations from this time on (ms) */
  fromTime?: number;
}

export interface IndexedRead {
  contents: JournalContents;
  /** records of the segments read only; starts, firstSeq, lastSeq and possiblySplit are the whole journal's */
  history: History;
  /** segments read (the rest answered from the index) */
  segmentsRead: number;
  segmentsTotal: number;
}

export interface IndexOptions {
  /** told when the index file was unusable and is being rebuilt */
  onRebuild?: (why: string) => void;
  /** persist what was (re)indexed (default true; a failure to write is ignored: it is a cache) */
  write?: boolean;
  /** segments changed less than this long ago are not cached (default RACY_MS; tests set 0) */
  racyMs?: number;
}

function indexPath(stateDir: string): string {
  return stateLayout(stateDir).journalIndex;
}

/** The last index read by this process, while its file is unchanged (a command looks twice: the --session check, then the read). */
let loaded: { key: string; entries: Map<string, IndexEntry> } | null = null;

function loadIndex(stateDir: string, o: IndexOptions): Map<string, IndexEntry> {
  let text: string;
  let key: string;
  try {
    const st = fs.statSync(indexPath(stateDir));
    key = `${indexPath(stateDir)}:${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
    if (loaded?.key === key) return new Map(loaded.entries);
    text = fs.readFileSync(indexPath(stateDir), 'utf8');
  } catch {
    return new Map();
  }
  const entries = parseIndex(stateDir, text, o);
  loaded = { key, entries };
  return new Map(entries);
}

/** sha256 (native) of the body, first 16 hex digits: catches a damaged or edited index file */
function digest(body: Buffer): string {
  return createHash('sha256').update(body).digest('hex').slice(0, 16);
}

function parseIndex(stateDir: string, text: string, o: IndexOptions): Map<string, IndexEntry> {
  const bad = (why: string) => {
    o.onRebuild?.(`journal index ${indexPath(stateDir)} ${why}: rebuilding it from the segments`);
    return new Map<string, IndexEntry>();
  };
  const sp = text.indexOf(' ');
  if (sp !== 16) return bad('is not an index file');
  const body = Buffer.from(text.slice(17), 'utf8');
  if (digest(body) !== text.slice(0, 16)) return bad('fails its checksum');
  let f: IndexFile;
  try {
    f = JSON.parse(body.toString('utf8')) as IndexFile;
  } catch {
    return bad('does not parse');
  }
  if (f.version !== INDEX_VERSION || !Array.isArray(f.entries)) return bad(`is of another version (${String(f.version)})`);
  return new Map(f.entries.map((e) => [e.name, e]));
}

function saveIndex(stateDir: string, entries: IndexEntry[]): void {
  const body = Buffer.from(JSON.stringify({ version: INDEX_VERSION, entries } satisfies IndexFile), 'utf8');
  const file = indexPath(stateDir);
  const tmp = `${file}.${process.pid}.tmp`;
  try {
    fs.writeFileSync(tmp, Buffer.concat([Buffer.from(digest(body) + ' ', 'latin1'), body]), { mode: 0o600 });
    fs.renameSync(tmp, file);
  } catch {
    // a cache: a read-only or full state directory only means the next reader scans again
    fs.rmSync(tmp, { force: true });
  }
}

function prefixes(p: string, into: Set<string>, maxDepth = PATH_DEPTH): void {
  into.add('/');
  let at = 0;
  for (let depth = 0; depth < maxDepth; depth++) {
    const next = p.indexOf('/', at + 1);
    if (next < 0) {
      if (p.length > at + 1) into.add(p);
      return;
    }
    into.add(p.slice(0, next));
    at = next;
  }
}

/** Keep at most MAX_PATHS prefixes, as deep as that allows. */
function shallow(paths: Set<string>): { paths: string[]; pathDepth: number } {
  let depth = PATH_DEPTH;
  let kept = paths;
  while (kept.size > MAX_PATHS && depth > 0) {
    depth--;
    const next = new Set<string>();
    for (const p of kept) prefixes(p, next, depth);
    kept = next;
  }
  return { paths: [...kept], pathDepth: depth };
}

/** The key a --path is looked up by in an entry of `depth` (what prefixes() kept of every path below it). */
function pathKey(p: string, depth: number): string {
  const s = new Set<string>();
  prefixes(p, s, depth);
  let longest = '/';
  for (const k of s) if (k.length > longest.length) longest = k;
  return longest;
}

function entryOf(seg: SegmentFile, st: fs.Stats, buf: Buffer): { entry: IndexEntry; records: LocatedRecord[] } {
  const scan = scanSegment(buf);
  const records: LocatedRecord[] = [];
  const sessions = new Set<string>();
  const rollbacks = new Set<string>();
  const paths = new Set<string>();
  const own = new Set<number>();
  const refs = new Set<number>();
  const beforeStart = new Set<string>();
  const starts: StartRecord[] = [];
  let seq: [number, number] | null = null;
  let time: [number, number] | null = null;
  let always = false;
  for (const l of scan.lines) {
    const r = l.record;
    records.push({ record: r, segment: seg.index, offset: l.offset });
    time = time ? [Math.min(time[0], r.time), Math.max(time[1], r.time)] : [r.time, r.time];
    switch (r.kind) {
      case 'op':
        own.add(r.seq);
        seq = seq ? [Math.min(seq[0], r.seq), Math.max(seq[1], r.seq)] : [r.seq, r.seq];
        sessions.add(r.session);
        for (const p of r.paths) prefixes(p, paths);
        if (r.undoes !== undefined) always = true;
        if (starts.length === 0) beforeStart.add(r.session);
        break;
      case 'start':
        starts.push(r);
        break;
      case 'rollback-intent':
        always = true;
        rollbacks.add(r.session);
        for (const s of r.ops) refs.add(s);
        break;
      case 'restored':
        always = true;
        rollbacks.add(r.session);
        refs.add(r.of);
        break;
      case 'rollback-end':
        always = true;
        rollbacks.add(r.session);
        break;
      case 'conflict':
        always = true;
        if (r.of !== undefined) refs.add(r.of);
        break;
      case 'tag':
        always = true; // few, and every listing and --to NAME needs them
        break;
      case 'segment':
      case 'close':
        break;
      default:
        refs.add(r.of);
    }
  }
  for (const s of own) refs.delete(s);
  const entry: IndexEntry = {
    name: path.basename(seg.path), size: buf.length, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs, ino: st.ino,
    facts: segmentFacts(scan, buf.length), seq, time, sessions: [...sessions], rollbacks: [...rollbacks], ...shallow(paths), refs: [...refs], always, starts, beforeStart: [...beforeStart],
  };
  return { entry, records };
}

function fresh(e: IndexEntry | undefined, st: fs.Stats): e is IndexEntry {
  return e !== undefined && e.size === st.size && e.mtimeMs === st.mtimeMs && e.ctimeMs === st.ctimeMs && e.ino === st.ino;
}

/** Read one segment whole, and what the index says of it. */
function readSegment(seg: SegmentFile): { entry: IndexEntry; records: LocatedRecord[] } {
  const fd = fs.openSync(seg.path, 'r');
  try {
    // stat before reading: a later append moves size or mtime past what the entry says
    const st = fs.fstatSync(fd);
    const buf = fs.readFileSync(fd);
    return entryOf(seg, st, buf);
  } finally {
    fs.closeSync(fd);
  }
}

interface Catalog {
  segments: SegmentFile[];
  entries: IndexEntry[];
  /** records of segments scanned while refreshing the index (no need to read them twice) */
  scanned: Map<number, LocatedRecord[]>;
}

/** Every segment's entry, scanning again those the index lacks or whose file changed; saved if anything changed. */
function catalog(stateDir: string, o: IndexOptions): Catalog {
  const segments = listSegments(stateLayout(stateDir).journalDir);
  const old = loadIndex(stateDir, o);
  const entries: IndexEntry[] = [];
  const scanned = new Map<number, LocatedRecord[]>();
  let changed = false;
  const now = Date.now();
  const persist: IndexEntry[] = [];
  for (const seg of segments) {
    const name = path.basename(seg.path);
    let st: fs.Stats;
    try {
      st = fs.statSync(seg.path);
    } catch {
      st = { size: -1, mtimeMs: -1, ctimeMs: -1, ino: -1 } as fs.Stats;
    }
    const e = old.get(name);
    if (fresh(e, st)) {
      entries.push(e);
      persist.push(e);
      continue;
    }
    const r = readSegment(seg);
    entries.push(r.entry);
    scanned.set(seg.index, r.records);
    if (now - Math.max(r.entry.mtimeMs, r.entry.ctimeMs) >= (o.racyMs ?? RACY_MS)) {
      persist.push(r.entry);
      changed = true;
    }
  }
  // entries of segments gone or changed: drop them (a file with none is not worth writing)
  if (persist.length !== old.size) changed = true;
  if (changed && o.write !== false) saveIndex(stateDir, persist);
  return { segments, entries, scanned };
}

function matches(e: IndexEntry, q: JournalQuery): boolean {
  if (q.session !== undefined && !e.sessions.includes(q.session) && !e.rollbacks.includes(q.session)) return false;
  if (q.path !== undefined && !e.paths.includes(pathKey(q.path, e.pathDepth))) return false;
  if (q.fromSeq !== undefined && (e.seq === null || e.seq[1] < q.fromSeq)) return false;
  if (q.fromTime !== undefined && (e.time === null || e.time[1] < q.fromTime)) return false;
  return true;
}

/**
 * The segments a query must read: those that can hold a matching operation, those holding what
 * every history needs (undos, rollbacks, conflicts), and everything tied to them by a reference
 * (an operation's outcome recorded in a later segment, a rollback's targets), both ways. null:
 * the index cannot tell (seq ranges out of order), read everything.
 */
function segmentsToRead(entries: IndexEntry[], q: JournalQuery): Set<number> | null {
  const withSeq: { i: number; lo: number; hi: number }[] = [];
  entries.forEach((e, i) => {
    if (e.seq) withSeq.push({ i, lo: e.seq[0], hi: e.seq[1] });
  });
  for (let k = 1; k < withSeq.length; k++) if ((withSeq[k] as { lo: number }).lo <= (withSeq[k - 1] as { hi: number }).hi) return null;
  const holder = (seq: number): number | null => {
    let lo = 0;
    let hi = withSeq.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const w = withSeq[mid] as { i: number; lo: number; hi: number };
      if (seq < w.lo) hi = mid - 1;
      else if (seq > w.hi) lo = mid + 1;
      else return w.i;
    }
    return null;
  };
  // segments tied by references, joined (union-find): a component is read whole or not at all
  const parent = entries.map((_e, i) => i);
  const find = (i: number): number => {
    while (parent[i] !== i) i = parent[i] = parent[parent[i] as number] as number;
    return i;
  };
  entries.forEach((e, i) => {
    for (const r of e.refs) {
      const j = holder(r);
      if (j !== null) parent[find(i)] = find(j);
    }
  });
  const roots = new Set<number>();
  entries.forEach((e, i) => {
    if (e.always || matches(e, q)) roots.add(find(i));
  });
  const out = new Set<number>();
  entries.forEach((_e, i) => {
    if (roots.has(find(i))) out.add(i);
  });
  return out;
}

/** The whole journal's seq bounds and sessions that may have lost their start (as buildHistory would find them). */
function journalWide(entries: IndexEntry[]): Pick<History, 'starts' | 'firstSeq' | 'lastSeq' | 'possiblySplit'> {
  const starts = entries.flatMap((e) => e.starts);
  let lastSeq = 0;
  let firstSeq: number | null = null;
  for (const e of entries) {
    if (!e.seq) continue;
    if (firstSeq === null || e.seq[0] < firstSeq) firstSeq = e.seq[0];
    if (e.seq[1] > lastSeq) lastSeq = e.seq[1];
  }
  for (const s of starts) if (s.lastSeq !== undefined && s.lastSeq > lastSeq) lastSeq = s.lastSeq;
  const first = firstSeq ?? lastSeq + 1;
  const beforeAnyStart = new Set<string>();
  for (const e of entries) {
    for (const s of e.beforeStart) beforeAnyStart.add(s);
    if (e.starts.length > 0) break;
  }
  return { starts, firstSeq: first, lastSeq, possiblySplit: first > 1 ? beforeAnyStart : new Set() };
}

function fullRead(stateDir: string): IndexedRead {
  const contents = readIntactJournal(stateDir);
  return { contents, history: buildHistory(contents.records), segmentsRead: contents.segments.length, segmentsTotal: contents.segments.length };
}

/**
 * readIntactJournal + buildHistory for a query, reading only the segments that can matter to it.
 * Every operation the query selects is in the history with all its records, and so is every undo
 * and rollback; the journal's integrity is checked whole (from the index for segments unchanged
 * since it was made), and a damaged journal is refused exactly as readIntactJournal refuses it.
 */
export function readJournalFor(stateDir: string, q: JournalQuery, o: IndexOptions = {}): IndexedRead {
  if (q.session === undefined && q.path === undefined && q.fromSeq === undefined && q.fromTime === undefined) return fullRead(stateDir);
  const cat = catalog(stateDir, o);
  const want = segmentsToRead(cat.entries, q);
  if (want === null) return fullRead(stateDir);
  const records: LocatedRecord[] = [];
  const byIndex = new Map(cat.segments.map((s, i) => [s.index, i]));
  const check = checkSegments(stateDir, cat.segments, (seg) => {
    const i = byIndex.get(seg.index) as number;
    if (!want.has(i)) return (cat.entries[i] as IndexEntry).facts;
    let recs = cat.scanned.get(seg.index);
    let facts = (cat.entries[i] as IndexEntry).facts;
    if (!recs) {
      const r = readSegment(seg);
      recs = r.records;
      facts = r.entry.facts;
    }
    for (const r of recs) records.push(r);
    return facts;
  });
  // damage: let the whole read say where, in the words it always used
  if (check.problems.length > 0) return fullRead(stateDir);
  const history = { ...buildHistory(records), ...journalWide(cat.entries) };
  return {
    contents: { records, segments: cat.segments, ...check },
    history,
    segmentsRead: want.size,
    segmentsTotal: cat.segments.length,
  };
}

/** Every session the journal names and its last seq, from the index (no integrity check: for telling a typo from an empty selection). */
export function journalCatalog(stateDir: string, o: IndexOptions = {}): { sessions: Set<string>; lastSeq: number } {
  const { entries } = catalog(stateDir, o);
  const sessions = new Set<string>();
  for (const e of entries) {
    for (const s of e.sessions) sessions.add(s);
    for (const s of e.starts) sessions.add(s.session);
  }
  return { sessions, lastSeq: journalWide(entries).lastSeq };
}

/** Bring the index up to date (the mount does it when it closes, so the next query finds it warm). */
export function refreshJournalIndex(stateDir: string, o: IndexOptions = {}): void {
  catalog(stateDir, o);
}

/** The index query that covers a rollback's selection (operations after --to, of --session, under --path). */
export function rollbackQuery(sel: { session?: string; path?: string; toSeq?: number; toTime?: number }): JournalQuery {
  const q: JournalQuery = {};
  if (sel.session !== undefined) q.session = sel.session;
  if (sel.path !== undefined) q.path = sel.path;
  if (sel.toSeq !== undefined) q.fromSeq = sel.toSeq + 1;
  if (sel.toTime !== undefined) q.fromTime = sel.toTime;
  return q;
}
