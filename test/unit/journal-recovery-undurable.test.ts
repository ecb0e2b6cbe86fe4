import { describe, expect, it } from 'vitest';
import type { Attr, Backend } from '../../src/core/index.js';
import { buildHistory } from '../../src/journal/history.js';
import type { LocatedRecord } from '../../src/journal/reader.js';
import type { JournalRecord, NodeState, State } from '../../src/journal/record.js';
import { LOST, reconcileUndurable, recoverPending } from '../../src/journal/recovery.js';
import type { JournalWriter } from '../../src/journal/writer.js';

/*
 * journal/recovery.ts reconcileUndurable: after a crash, the after-states the crashed writer
 * journaled for files whose store holds changes back until close (GCS) are checked against what
 * the store holds. Only what the journal explains is recorded (lost, or the create's own empty
 * file); anything else is left for rollback to name as a conflict, so it never restores over it.
 */

const T0 = 1_700_000_000_000_000_000n;
const file = (size: number, mtime: bigint, mode = 0o644, ino = 7): NodeState => ({
  type: 'file', mode, uid: 1000, gid: 1000, size, mtimeNs: mtime.toString(), ino, nlink: 1,
});
const attrOf = (s: NodeState): Attr =>
  ({
    type: s.type, mode: s.mode, uid: s.uid, gid: s.gid, size: s.size, mtimeNs: BigInt(s.mtimeNs), atimeNs: BigInt(s.mtimeNs), ctimeNs: BigInt(s.mtimeNs), ino: s.ino, nlink: s.nlink,
  }) as unknown as Attr;

/** a store that holds `files` (path -> state) and nothing else */
function store(files: Record<string, State>): Backend {
  return {
    tryStat: async (p: string) => {
      const s = files[p];
      return s ? attrOf(s) : null;
    },
  } as unknown as Backend;
}

function writer(): { w: JournalWriter; written: JournalRecord[] } {
  const written: JournalRecord[] = [];
  const w = { appendNow: (r: JournalRecord) => written.push(r), sync: async () => undefined } as unknown as JournalWriter;
  return { w, written };
}

let offset = 0;
const loc = (record: JournalRecord): LocatedRecord => ({ record, segment: 1, offset: offset++ });
const start = (lastSeq: number): JournalRecord => ({ kind: 'start', time: 1, session: `s${lastSeq}`, actor: 't', pid: 1, source: '/x', version: 2, lastSeq });
const op = (seq: number, o: string, path: string, before: State, extra: Partial<JournalRecord> = {}): JournalRecord =>
  ({ kind: 'op', seq, time: seq, session: 'killed', actor: 't', op: o, paths: [path], before: [before], ...extra }) as JournalRecord;
const end = (of: number, after: State, reason: 'close' | 'fsync' | 'split' = 'split'): JournalRecord => ({ kind: 'end', of, time: of, after: [after], reason });
const done = (of: number, after: State): JournalRecord => ({ kind: 'done', of, time: of, after: [after] });

const created = file(0, T0);
const written = file(1791, T0 + 5_000_000n);
const timed = file(1791, T0 - 10n ** 18n);

/** tar: create (its first write session continues the record), write, futimens (splits it), then the kill */
const tarRecords = (): JournalRecord[] => [start(0), op(1, 'create', '/f', null), end(1, written), op(2, 'utimens', '/f', written), done(2, timed)];

async function reconcile(records: JournalRecord[], files: Record<string, State>) {
  const h = buildHistory(records.map(loc));
  const { w, written: out } = writer();
  const report = await reconcileUndurable(h, store(files), w);
  return { report, out, h };
}

describe('journal recovery: after-states the store never got', () => {
  it("tar's file killed before close: the empty object open() made stands for the create, the futimens is lost", async () => {
    const { report, out, h } = await reconcile(tarRecords(), { '/f': created });
    expect(report).toEqual({ files: 1, lost: 1, corrected: 1 });
    expect(out).toEqual([
      expect.objectContaining({ kind: 'end', of: 1, reason: 'recovered', after: [expect.objectContaining({ size: 0 })] }),
      expect.objectContaining({ kind: 'failed', of: 2, errno: LOST, recovered: true }),
    ]);
    // read back, the history is what a strict rollback plans from: remove the empty file, nothing else
    const again = buildHistory([...tarRecords(), ...out].map(loc));
    expect(again.bySeq.get(1)?.after?.[0]?.size).toBe(0);
    expect(again.bySeq.get(2)?.status).toBe('failed');
    expect(h.bySeq.get(2)?.status).toBe('failed');
  });

  it("killed after tar's fchown was journaled but before its outcome: the pending fchown resolved from the store does not hide the lost write", async () => {
    // (root's tar: create 0600, write, futimens, fchown, fchmod, close; recoverPending runs first)
    const records: JournalRecord[] = [...tarRecords(), op(3, 'chown', '/f', timed, { args: { uid: 1000, gid: 1000 } } as Partial<JournalRecord>)];
    const h = buildHistory(records.map(loc));
    const { w, written: out } = writer();
    const files = { '/f': created };
    const pending = await recoverPending(h, store(files), w);
    expect(pending.applied).toBe(1);
    const report = await reconcileUndurable(h, store(files), w);
    expect(report).toEqual({ files: 1, lost: 2, corrected: 1 });
    const again = buildHistory([...records, ...out].map(loc));
    expect([1, 2, 3].map((seq) => again.bySeq.get(seq)?.status)).toEqual(['done', 'failed', 'failed']);
    expect(again.bySeq.get(1)?.after?.[0]?.size).toBe(0);
  });

  it('the object is not there at all: the create is lost too', async () => {
    const { report, out } = await reconcile(tarRecords(), {});
    expect(report).toEqual({ files: 1, lost: 2, corrected: 0 });
    expect(out.map((r) => [r.kind, (r as { of: number }).of])).toEqual([['failed', 1], ['failed', 2]]);
  });

  it('an existing file overwritten and chmodded while open: the store still holds the old file, both are lost', async () => {
    const old = file(26, T0 - 1000n);
    const records: JournalRecord[] = [
      start(0), op(1, 'write', '/k', old), { kind: 'capture', of: 1, time: 1, blob: 'a'.repeat(64), size: 26 },
      end(1, file(27, T0)), op(2, 'chmod', '/k', file(27, T0)), done(2, file(27, T0, 0o600)),
    ];
    const { report, out } = await reconcile(records, { '/k': old });
    expect(report).toEqual({ files: 1, lost: 2, corrected: 0 });
    expect(out.every((r) => r.kind === 'failed')).toBe(true);
  });

  it('a session that reached an fsync before the kill stands with what the fsync uploaded', async () => {
    const synced = file(16, T0 + 1_000_000_000n);
    const records: JournalRecord[] = [
      start(0), op(1, 'create', '/s', null), end(1, synced, 'fsync'), { kind: 'resume', of: 1, time: 2 }, end(1, file(30, T0 + 2_000_000_000n)),
      op(2, 'utimens', '/s', file(30, T0 + 2_000_000_000n)), done(2, file(30, T0 - 10n ** 18n)),
    ];
    const { report, out } = await reconcile(records, { '/s': synced });
    expect(report).toEqual({ files: 1, lost: 1, corrected: 1 });
    expect(out[0]).toEqual(expect.objectContaining({ kind: 'end', of: 1, after: [expect.objectContaining({ size: 16 })] }));
  });

  it('what landed is what the journal says: nothing is recorded', async () => {
    const { report, out } = await reconcile(tarRecords(), { '/f': timed });
    expect(report.files).toBe(0);
    expect(out).toEqual([]);
  });

  it('bytes the journal cannot explain (someone else wrote the object) are left for rollback to name as a conflict', async () => {
    const { report, out } = await reconcile(tarRecords(), { '/f': file(99, T0 + 9n) });
    expect(report.files).toBe(0);
    expect(out).toEqual([]);
  });

  it('a session ended at close (uploaded before its end record) is not questioned', async () => {
    const records: JournalRecord[] = [start(0), op(1, 'create', '/c', null), end(1, written, 'close')];
    const { out } = await reconcile(records, { '/c': created });
    expect(out).toEqual([]);
  });

  it('a file renamed after its write is left alone (a rename does not wait for a close)', async () => {
    const records: JournalRecord[] = [
      start(0), op(1, 'create', '/f', null), end(1, written),
      { kind: 'op', seq: 2, time: 2, session: 'killed', actor: 't', op: 'rename', paths: ['/f', '/g'], before: [written, null] }, done(2, null),
    ];
    (records[4] as { after: State[] }).after = [null, written];
    const { out } = await reconcile(records, { '/g': created });
    expect(out).toEqual([]);
  });

  it("only the crashed writer's operations: an earlier mount's are not looked at", async () => {
    const records: JournalRecord[] = [...tarRecords(), start(2), op(3, 'mkdir', '/d', null), done(3, { ...created, type: 'dir' })];
    const { out } = await reconcile(records, { '/f': created, '/d': { ...created, type: 'dir' } });
    expect(out).toEqual([]);
  });
});
