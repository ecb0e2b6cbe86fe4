import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { encodeRecord } from '../../src/journal/codec.js';
import { buildHistory } from '../../src/journal/history.js';
import { listSegments, stateLayout } from '../../src/journal/layout.js';
import { JournalDamagedError, readIntactJournal, readJournal } from '../../src/journal/reader.js';
import type { JournalRecord } from '../../src/journal/record.js';
import { verifyJournal } from '../../src/journal/verify.js';
import { asIfKilled, openTestJournal, vfsFs } from '../helpers/journal.js';
import { CLI } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { snapshotTree } from '../helpers/tree.js';

/*
 * A journal read back must be all there or say what is not: damage found later (a flipped byte,
 * a segment gone, a cut end) is refused by what needs the records, while the torn end of the
 * segment a crash interrupted is the next start's to cut.
 */

function ledgerfs(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('journal integrity', () => {
  let dir: string;
  let src: string;
  let state: string;
  beforeEach(async () => {
    dir = makeTemp('journal');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
    fs.writeFileSync(path.join(src, 'a.txt'), 'alpha\n');
    // three writers, three segments: s1 creates /b, s2 overwrites /a and makes /d, s3 writes /c
    const sessions: [string, (vfs: Awaited<ReturnType<typeof openTestJournal>>['vfs']) => Promise<void>][] = [
      ['s1', (vfs) => vfsFs.write(vfs, '/b.txt', 'bravo\n')],
      ['s2', async (vfs) => {
        await vfsFs.write(vfs, '/a.txt', 'ALPHA!\n');
        await vfs.mkdir('/d', 0o755);
      }],
      ['s3', (vfs) => vfsFs.write(vfs, '/c.txt', 'charlie\n')],
    ];
    for (const [session, work] of sessions) {
      const j = await openTestJournal(src, state, session);
      await work(j.vfs);
      await j.close();
    }
  });
  afterEach(() => rmTemp(dir));

  const segs = () => listSegments(stateLayout(state).journalDir);
  const seg = (n: number) => (segs()[n - 1] as { path: string }).path;

  /** Roll back session s3 on the unmounted workspace, as `ledgerfs rollback` does. */
  async function rollbackS3(): Promise<unknown> {
    const j = await openTestJournal(src, state, 'rollback-test');
    try {
      return await j.svc.rollback({ session: 's3' });
    } finally {
      await j.close();
    }
  }

  it('a clean journal: every segment framed and closed, nothing to report', () => {
    const c = readJournal(state);
    expect(segs().map((s) => path.basename(s.path))).toEqual(['000001.log', '000002.log', '000003.log']);
    expect(c.problems).toEqual([]);
    expect(c.tornTail).toBeNull();
    expect(c.unclosed).toBeNull();
    expect(fs.existsSync(path.join(stateLayout(state).journalDir, 'writing.json'))).toBe(false);
  });

  it('finds every single-byte flip in every segment, and names the records around it', () => {
    for (const s of segs()) {
      const orig = fs.readFileSync(s.path);
      for (let i = 0; i < orig.length; i++) {
        const bad = Buffer.from(orig);
        bad[i] = (bad[i] as number) ^ 0x01;
        fs.writeFileSync(s.path, bad);
        const c = readJournal(state);
        expect(c.problems.length, `flip at byte ${i} of ${s.path}`).toBeGreaterThan(0);
        expect(c.problems[0]?.segment).toBe(s.path);
        expect(c.tornTail, `flip at byte ${i} of ${s.path} taken for a crash`).toBeNull();
      }
      fs.writeFileSync(s.path, orig);
    }
    expect(readJournal(state).problems).toEqual([]);
  });

  it('a flipped record: rollback refuses with the range it cannot read and changes nothing', async () => {
    const text = fs.readFileSync(seg(2), 'utf8');
    fs.writeFileSync(seg(2), text.replace('"/d"', '"/e"'));
    expect(() => readIntactJournal(state)).toThrow(JournalDamagedError);
    expect(() => readIntactJournal(state)).toThrow(/000002\.log at byte \d+: checksum mismatch \(records after #\d+ and before #\d+\)/);
    const before = snapshotTree(src);
    await expect(rollbackS3()).rejects.toThrow(/the journal cannot be read whole, so nothing was done/);
    expect(snapshotTree(src)).toEqual(before);
  });

  it('a segment missing in the middle is named, and refused', async () => {
    fs.rmSync(seg(2));
    const c = readJournal(state);
    expect(c.problems.map((p) => p.reason)).toEqual(['segment missing (000001.log and 000003.log exist)']);
    expect(c.problems[0]?.segment).toMatch(/000002\.log$/);
    const before = snapshotTree(src);
    await expect(rollbackS3()).rejects.toThrow(/000002\.log at byte 0: segment missing/);
    expect(snapshotTree(src)).toEqual(before);
  });

  it('the last segment cut short after a clean close is damage: not cut again at start, refused', async () => {
    const last = seg(3);
    const size = fs.statSync(last).size;
    // at a line boundary (the close record gone), and in the middle of a record
    for (const cutTo of [fs.readFileSync(last, 'utf8').slice(0, -1).lastIndexOf('\n') + 1, size - 40]) {
      fs.truncateSync(last, cutTo);
      const c = readJournal(state);
      expect(c.tornTail).toBeNull();
      expect(c.problems).toHaveLength(1);
      expect(c.problems[0]?.reason).toMatch(/without its close record: records at its end were cut off \(it was complete: its writer closed the journal\)/);
      const before = snapshotTree(src);
      await expect(rollbackS3()).rejects.toThrow(/000003\.log at byte \d+: the segment ends/);
      expect(snapshotTree(src)).toEqual(before);
      // the start of the refused rollback did not "repair" the evidence away
      expect(fs.statSync(last).size).toBe(cutTo);
      for (const s of segs().slice(3)) fs.rmSync(s.path); // the refused attempt's own segment
    }
  });

  it('a middle segment cut at a record boundary is damage (a later segment proves it was complete)', () => {
    const text = fs.readFileSync(seg(2), 'utf8');
    const lines = text.split('\n').filter(Boolean);
    fs.writeFileSync(seg(2), lines.slice(0, -2).join('\n') + '\n'); // its last record and its close record
    const c = readJournal(state);
    expect(c.problems.map((p) => p.reason)).toEqual([expect.stringMatching(/without its close record.*a later segment exists/)]);
    // a record dropped before the close record shows as well
    fs.writeFileSync(seg(2), [...lines.slice(0, 2), ...lines.slice(3)].join('\n') + '\n');
    expect(readJournal(state).problems.map((p) => p.reason)).toEqual([expect.stringMatching(/bytes of records missing before the close record/)]);
  });

  it('the torn end of the segment a crash interrupted is not damage: the next start cuts and closes it', async () => {
    const last = asIfKilled(state);
    fs.appendFileSync(last, encodeRecord({ kind: 'op', seq: 99, time: 1, session: 's3', actor: 'x', op: 'mkdir', paths: ['/z'], before: [null] }).subarray(0, 30));
    let c = readJournal(state);
    expect(c.problems).toEqual([]);
    expect(c.tornTail?.path).toBe(last);
    expect(c.unclosed?.path).toBe(last);
    const j = await openTestJournal(src, state, 'after-crash');
    expect(j.svc.startNote).toMatch(/cut a torn record at the end of .*000003\.log \(30 bytes/);
    expect(j.svc.startNote).toMatch(/closed .*000003\.log, which its writer left open \(a crash\)/);
    await j.close();
    c = readJournal(state);
    expect(c.problems).toEqual([]);
    expect(c.records.some((r) => r.record.kind === 'close' && r.record.reason === 'recovered' && r.record.cut === 30)).toBe(true);
    expect(readIntactJournal(state).records.length).toBeGreaterThan(0);
    const v = await verifyJournal(state);
    expect(v.problems).toEqual([]);
    expect(v.notes).toContain('1 segment(s) closed by the start after a crash: 000003.log (a torn record of 30 bytes cut)');
  });

  it('keeps journals of the first format readable: unframed segments, a torn tail cut as before', async () => {
    const legacy = path.join(dir, 'legacy');
    fs.mkdirSync(path.join(legacy, 'journal'), { recursive: true });
    const op = (seq: number, p: string): JournalRecord => ({ kind: 'op', seq, time: 1_700_000_000_000 + seq, session: 'old', actor: 'mount', op: 'mkdir', paths: [p], before: [null] });
    const done = (seq: number): JournalRecord => ({ kind: 'done', of: seq, time: 1_700_000_000_000 + seq, after: [null] });
    fs.writeFileSync(path.join(legacy, 'journal/000001.log'), Buffer.concat([op(1, '/x'), done(1)].map(encodeRecord)));
    fs.writeFileSync(path.join(legacy, 'journal/000002.log'), Buffer.concat([...[op(2, '/y'), done(2)].map(encodeRecord), Buffer.from('0000 {"kind":"op","se')]));
    let c = readJournal(legacy);
    expect(c.problems).toEqual([]);
    expect(c.tornTail?.path).toMatch(/000002\.log$/);
    const j = await openTestJournal(src, legacy, 'new');
    expect(j.svc.startNote).toMatch(/cut a torn record/);
    await j.close();
    c = readJournal(legacy);
    expect(c.problems).toEqual([]);
    expect(c.records.filter((r) => r.record.kind === 'op').map((r) => (r.record as { seq: number }).seq)).toEqual([1, 2]);
  });

  it('CLI: rollback, log and diff refuse a damaged journal with a sentence and exit non-zero', () => {
    fs.writeFileSync(seg(2), fs.readFileSync(seg(2), 'utf8').replace('"/d"', '"/e"'));
    const before = snapshotTree(src);
    for (const args of [['rollback', '--session', 's3'], ['rollback', '--session', 's3', '--dry-run'], ['log'], ['diff', '--session', 's2']]) {
      const r = ledgerfs([...args, '--source', src, '--state', state]);
      expect(r.status, `${args.join(' ')}: ${r.stderr}`).toBe(1);
      expect(r.stderr).toMatch(/^ledgerfs: the journal cannot be read whole, so nothing was done: .*000002\.log at byte \d+: checksum mismatch \(records after #\d+ and before #\d+\)/);
      expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
    }
    expect(snapshotTree(src)).toEqual(before);
    expect(segs()).toHaveLength(3); // nothing written to the journal either
  });

  describe('ledgerfs verify', () => {
    interface Damage { kind: string; message: string; segment?: string; blob?: string; seq?: number; afterSeq?: number }
    const verify = () => {
      const text = ledgerfs(['verify', '--state', state]);
      const json = ledgerfs(['verify', '--state', state, '--json']);
      return { text, json, report: JSON.parse(json.stdout) as { clean: boolean; damage: Damage[]; problems: string[] } };
    };

    it('clean journal: exit 0', () => {
      const v = verify();
      expect([v.text.status, v.json.status, v.report.clean]).toEqual([0, 0, true]);
      expect(v.text.stdout).toMatch(/^clean$/m);
    });

    it('the last segment cut short after a clean close: exit 1, naming the segment and the cut', () => {
      const last = seg(3);
      fs.truncateSync(last, fs.readFileSync(last, 'utf8').slice(0, -1).lastIndexOf('\n') + 1);
      const v = verify();
      expect([v.text.status, v.json.status, v.report.clean]).toEqual([1, 1, false]);
      expect(v.text.stdout).toMatch(/^PROBLEM \(cut-segment\): .*000003\.log at byte \d+: the segment ends at byte \d+ without its close record/m);
      expect(v.text.stdout).toMatch(/^1 problem\(s\)$/m);
      expect(v.report.damage).toEqual([expect.objectContaining({ kind: 'cut-segment', segment: last })]);
    });

    it('a missing segment: exit 1, naming it', () => {
      const gone = seg(2);
      fs.rmSync(gone);
      const v = verify();
      expect([v.text.status, v.json.status]).toEqual([1, 1]);
      expect(v.text.stdout).toMatch(/^PROBLEM \(missing-segment\): .*000002\.log at byte 0: segment missing \(000001\.log and 000003\.log exist\)/m);
      expect(v.report.damage).toEqual([expect.objectContaining({ kind: 'missing-segment', segment: gone })]);
    });

    it('a before-image whose bytes no longer match its hash: exit 1, naming the blob and the record', () => {
      const c = readJournal(state);
      const capture = c.records.map((r) => r.record).find((r) => r.kind === 'capture');
      if (capture?.kind !== 'capture') throw new Error('s2 kept no before-image');
      const blob = path.join(stateLayout(state).blobsDir, capture.blob.slice(0, 2), capture.blob.slice(2));
      const bytes = fs.readFileSync(blob);
      bytes[0] = (bytes[0] as number) ^ 0x20;
      fs.chmodSync(blob, 0o600);
      fs.writeFileSync(blob, bytes);
      const v = verify();
      expect([v.text.status, v.json.status]).toEqual([1, 1]);
      expect(v.text.stdout).toMatch(new RegExp(`^PROBLEM \\(blob-hash\\): #${capture.of} before-image of /a\\.txt: blob ${capture.blob} does not match its hash`, 'm'));
      expect(v.report.damage).toEqual([expect.objectContaining({ kind: 'blob-hash', blob: capture.blob, seq: capture.of, path: '/a.txt' })]);
    });

    it('all at once: each named, the flipped record with the records around it', () => {
      fs.writeFileSync(seg(2), fs.readFileSync(seg(2), 'utf8').replace('"/d"', '"/e"'));
      fs.truncateSync(seg(3), fs.statSync(seg(3)).size - 3);
      const v = verify();
      expect(v.text.status).toBe(1);
      // the flipped line was mkdir /d's intent: its outcome record now names an operation not there
      expect(v.report.damage.map((d) => d.kind).sort()).toEqual(['cut-segment', 'record', 'reference']);
      const rec = v.report.damage.find((d) => d.kind === 'record');
      expect(rec?.message).toMatch(/000002\.log at byte \d+: checksum mismatch \(records after #\d+ and before #\d+\)/);
      expect(rec?.afterSeq).toBeGreaterThan(0);
    });

    it('a crash\'s torn tail is a note, not damage', () => {
      const last = asIfKilled(state);
      fs.appendFileSync(last, '0000 {"kind":"op","se');
      const v = verify();
      expect(v.text.status).toBe(0);
      expect(v.text.stdout).toMatch(/^note: .*000003\.log ends in a torn record \(21 bytes: incomplete last line\)/m);
      expect(v.text.stdout).toMatch(/^note: .*000003\.log was being written when its writer stopped \(a crash\); the next start closes it$/m);
    });
  });
});

describe('gc keeps sessions whole', () => {
  let dir: string;
  let src: string;
  let state: string;
  /** between the records of s1's first part and those of its second */
  let mid: number;
  let afterS0: ReturnType<typeof snapshotTree>;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  beforeEach(async () => {
    dir = makeTemp('journal');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    fs.mkdirSync(src);
    let j = await openTestJournal(src, state, 's0');
    await vfsFs.write(j.vfs, '/g0.txt', 'old\n');
    await j.close();
    afterS0 = snapshotTree(src);
    // s1 is one long session: it began well before the cutoff and went on well after it
    j = await openTestJournal(src, state, 's1');
    await j.vfs.mkdir('/long', 0o755);
    await vfsFs.write(j.vfs, '/long/a.txt', 'one\n');
    await sleep(5);
    mid = Date.now();
    await sleep(5);
    await vfsFs.write(j.vfs, '/long/a.txt', 'two\n');
    await vfsFs.write(j.vfs, '/long/b.txt', 'bee\n');
    await j.close();
    j = await openTestJournal(src, state, 's2');
    await vfsFs.write(j.vfs, '/late.txt', 'late\n');
    await j.close();
    // everything before `mid` happened two hours ago, so that a gc keeping 1h cuts at `mid`
    rewriteJournal(state, (r) => ('time' in r && r.time < mid ? { ...r, time: r.time - 2 * 3_600_000 } : r));
  });
  afterEach(() => rmTemp(dir));

  const keepToMid = () => '1h';
  const ops = () => buildHistory(readJournal(state).records).ops;
  const cli = (...args: string[]) => ledgerfs([...args, '--source', src, '--state', state]);
  const stateFiles = () => {
    const out: Record<string, string> = {};
    const walk = (d: string) => {
      for (const e of fs.readdirSync(d, { withFileTypes: true })) {
        const p = path.join(d, e.name);
        if (e.isDirectory()) walk(p);
        else out[path.relative(state, p)] = fs.readFileSync(p).toString('base64');
      }
    };
    walk(state);
    return out;
  };

  it('drops only whole sessions: a session that goes on after the cutoff stays whole and rolls back whole', () => {
    const s1 = ops().filter((o) => o.session === 's1').map((o) => o.seq);
    const r = cli('gc', '--keep', keepToMid(), '--json');
    expect(r.status, r.stderr).toBe(0);
    const gc = JSON.parse(r.stdout) as { droppedSessions: string[]; stoppedAt: { session: string; reason: string } | null; segmentsRemoved: number };
    expect(gc.droppedSessions).toEqual(['s0']);
    expect(gc.stoppedAt).toEqual(expect.objectContaining({ session: 's1', reason: expect.stringMatching(/whole sessions only/) }));
    expect(gc.segmentsRemoved).toBe(1);
    expect(ops().filter((o) => o.session === 's1').map((o) => o.seq)).toEqual(s1);
    expect(readJournal(state).problems).toEqual([]);
    const rb = cli('rollback', '--session', 's1');
    expect(rb.status, rb.stderr + rb.stdout).toBe(0);
    expect(snapshotTree(src, ['late.txt'])).toEqual(afterS0);
  });

  it('a session an older gc split: rollback says so and refuses without --partial', () => {
    const s1 = ops().filter((o) => o.session === 's1');
    olderGc(state, (s1[2] as { seq: number }).seq); // as the gc before this one did: s0 and s1's first two mutations gone
    const before = snapshotTree(src);
    for (const extra of [[], ['--dry-run']]) {
      const r = cli('rollback', '--session', 's1', ...extra);
      expect(r.status).toBe(2);
      expect(r.stderr).toMatch(/^ledgerfs: session s1 began before the oldest record the journal still holds \(#\d+\): an older gc dropped its start.*--partial undoes that part anyway/);
    }
    expect(snapshotTree(src)).toEqual(before);
    // another session is whole: its rollback is not held up
    expect(cli('rollback', '--session', 's2', '--dry-run').status).toBe(0);
    const r = cli('rollback', '--session', 's1', '--partial');
    expect(r.status, r.stderr + r.stdout).toBe(0);
    expect(fs.readFileSync(path.join(src, 'long/a.txt'), 'utf8')).toBe('one\n'); // the part that remained, undone
    expect(fs.existsSync(path.join(src, 'long/b.txt'))).toBe(false);
  });

  it('gc --dry-run says what would go (sessions, segments, before-images, bytes) and changes nothing', () => {
    const files = stateFiles();
    const keep = keepToMid();
    const text = cli('gc', '--keep', keep, '--dry-run');
    expect(text.status, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^Would drop 1 session\(s\), 1 mutation\(s\) older than .*, 1 segment\(s\) \(0 more to be rewritten\) and 0 before-image\(s\): \d+ bytes to free; \d+ mutation\(s\) kept \(from #\d+\)\.$/m);
    expect(text.stdout).toMatch(/^ {2}sessions: s0$/m);
    expect(text.stdout).toMatch(/^ {2}stopped at #\d+ \(session s1\): the session goes on after the cutoff/m);
    expect(text.stdout).toMatch(/^Nothing was changed \(--dry-run\)\.$/m);
    const json = cli('gc', '--keep', keep, '--dry-run', '--json');
    const dry = JSON.parse(json.stdout) as Record<string, unknown>;
    expect(dry.dryRun).toBe(true);
    expect(stateFiles()).toEqual(files);
    const real = JSON.parse(cli('gc', '--keep', keep, '--json').stdout) as Record<string, unknown>;
    for (const k of ['droppedSessions', 'droppedOperations', 'keptOperations', 'firstSeq', 'segmentsRemoved', 'segmentsRewritten', 'blobsRemoved', 'bytesFreed']) {
      expect(real[k], k).toEqual(dry[k]);
    }
    expect(real.dryRun).toBe(false);
  });

  it('a damaged journal: gc refuses and changes nothing', () => {
    const seg = listSegments(stateLayout(state).journalDir)[1]?.path as string;
    fs.writeFileSync(seg, fs.readFileSync(seg, 'utf8').replace('"/long"', '"/lonG"'));
    const files = stateFiles();
    for (const extra of [[], ['--dry-run']]) {
      const r = cli('gc', '--keep', keepToMid(), ...extra);
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(/^ledgerfs: the journal cannot be read whole, so nothing was done: .*000002\.log/);
    }
    expect(stateFiles()).toEqual(files);
  });
});

/** Rewrite every segment's records through `fn` (null drops one), keeping segments framed and closed. */
function rewriteJournal(state: string, fn: (r: JournalRecord, at: { segment: number; offset: number }) => JournalRecord | null): void {
  const c = readJournal(state);
  for (const s of listSegments(stateLayout(state).journalDir)) {
    let bytes = 0;
    const parts: Buffer[] = [];
    for (const r of c.records.filter((x) => x.segment === s.index)) {
      const rec = fn(r.record, r);
      if (!rec) continue;
      const b = encodeRecord(rec.kind === 'close' ? { ...rec, bytes } : rec);
      bytes += b.length;
      parts.push(b);
    }
    fs.writeFileSync(s.path, Buffer.concat(parts));
  }
}

/**
 * What gc did before it kept sessions whole: drop every mutation below `belowSeq` with its
 * records, and the start records before the first one kept; a segment left with nothing else
 * than its framing, at the start, goes.
 */
function olderGc(state: string, belowSeq: number): void {
  const c = readJournal(state);
  const firstKept = c.records.find((r) => r.record.kind === 'op' && r.record.seq >= belowSeq) as { segment: number; offset: number };
  const before = (r: { segment: number; offset: number }) => r.segment < firstKept.segment || (r.segment === firstKept.segment && r.offset < firstKept.offset);
  rewriteJournal(state, (rec, at) => {
    if (rec.kind === 'op') return rec.seq >= belowSeq ? rec : null;
    if (rec.kind === 'start') return before(at) ? null : rec;
    if ('of' in rec && rec.of !== undefined) return rec.of >= belowSeq ? rec : null;
    return rec;
  });
  for (const s of listSegments(stateLayout(state).journalDir)) {
    if (s.index >= firstKept.segment) break;
    if (readJournal(state).records.filter((r) => r.segment === s.index).every((r) => r.record.kind === 'segment' || r.record.kind === 'close')) fs.rmSync(s.path);
  }
  expect(readJournal(state).problems).toEqual([]);
}
