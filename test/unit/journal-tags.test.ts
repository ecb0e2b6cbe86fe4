import { describe, expect, it } from 'vitest';
import { buildHistory, makeTag, TagError } from '../../src/journal/index.js';
import type { LocatedRecord } from '../../src/journal/reader.js';
import type { JournalRecord } from '../../src/journal/record.js';
import { recordSchema } from '../../src/journal/record.js';
import { parseWhen, tagNameProblem } from '../../src/cli/journal-flags.js';

/* Named checkpoints (issue 18): the record, the history's view of it, and what a name may be. */

const at = (records: JournalRecord[]): LocatedRecord[] => records.map((record, i) => ({ record, segment: 'x', offset: i, length: 1 }) as unknown as LocatedRecord);

describe('tags in the journal', () => {
  const tag: JournalRecord = { kind: 'tag', time: 1000, name: 'before-reorg', at: 41, actor: 'tag' };

  it('is a record the schema accepts, and the history finds by name', () => {
    expect(recordSchema().parse(tag)).toEqual(tag);
    expect(recordSchema().safeParse({ ...tag, at: -1 }).success).toBe(false);
    const h = buildHistory(at([tag]));
    expect(h.tags.get('before-reorg')).toEqual(tag);
  });

  it('refuses a name already taken, naming the point it marks', () => {
    const h = buildHistory(at([tag]));
    expect(() => makeTag(h, { name: 'before-reorg', actor: 'tag' }, 50)).toThrow(TagError);
    expect(() => makeTag(h, { name: 'before-reorg', actor: 'tag' }, 50)).toThrow(/tag before-reorg already marks #41 .*tag names are unique in a journal/);
    expect(makeTag(h, { name: 'next', session: 's1', actor: 'tag' }, 50, 7)).toEqual({ kind: 'tag', time: 7, name: 'next', at: 50, session: 's1', actor: 'tag' });
  });

  it('lets no name through that --to would read as a seq, a duration or a time', () => {
    for (const bad of ['42', '#42', '10m', '1h30m', '7d', '2026-11-22T05:30:00Z', '', '-x', 'a b', 'a/b']) expect(tagNameProblem(bad), bad).not.toBeNull();
    expect(tagNameProblem('10m')).toMatch(/reads as a sequence number, a duration or an ISO 8601 time/);
    for (const good of ['before-reorg', 'v1', 'plan.2', '2026-release', 'x_y']) expect(tagNameProblem(good), good).toBeNull();
  });

  it('reads a tag where --to takes a point, after seqs, durations and times', () => {
    const tags = buildHistory(at([tag])).tags;
    expect(parseWhen('before-reorg', '--to', tags)).toEqual({ seq: 41, tag });
    expect(parseWhen('42', '--to', tags)).toEqual({ seq: 42 });
    expect(() => parseWhen('befor-reorg', '--to', tags)).toThrow(/--to: "befor-reorg" is not a sequence number, a duration or an ISO 8601 time with zone, nor a tag of this journal .*tags: before-reorg/);
  });
});
