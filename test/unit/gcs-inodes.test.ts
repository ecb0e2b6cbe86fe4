import { describe, expect, it } from 'vitest';
import { InodeNumbers } from '../../src/backend/gcs/inodes.js';

// Inode numbers of the GCS backend: a rename keeps the node's number (POSIX), the vacated path
// gets one nobody else has, and nothing else changes number.
describe('InodeNumbers', () => {
  it("a file's rename carries its number; the vacated path and the replaced one get numbers no live node has", () => {
    const ino = new InodeNumbers();
    const a = ino.of('/d/tmp_obj_1');
    const other = ino.of('/d/other');
    const over = ino.of('/d/over');
    ino.renamedFile('/d/tmp_obj_1', '/d/ab');
    expect(ino.of('/d/ab')).toBe(a);
    expect(ino.of('/d/tmp_obj_1')).not.toBe(a);
    ino.renamedFile('/d/ab', '/d/over'); // over an existing file: its number goes with it
    expect(ino.of('/d/over')).toBe(a);
    expect(ino.of('/d/over')).not.toBe(over);
    expect(ino.of('/d/other')).toBe(other);
    const live = ['/d/tmp_obj_1', '/d/ab', '/d/over', '/d/other'].map((p) => ino.of(p));
    expect(new Set(live).size).toBe(live.length);
  });

  it('a directory rename carries the numbers below it, as renamed() did for files before', () => {
    const ino = new InodeNumbers();
    ino.renamedFile('/src/f', '/src/g');
    const g = ino.of('/src/g');
    const dir = ino.of('/src');
    ino.renamed('/src', '/dst', ['/src/g']);
    expect(ino.of('/dst')).toBe(dir);
    expect(ino.of('/dst/g')).toBe(g);
    expect(ino.of('/src/g')).not.toBe(g);
  });

  it('thousands of renames, as git makes, keep every number distinct', () => {
    const ino = new InodeNumbers();
    const kept: number[] = [];
    for (let i = 0; i < 5000; i++) {
      const n = ino.of(`/o/tmp_${i}`);
      ino.renamedFile(`/o/tmp_${i}`, `/o/obj_${i}`);
      expect(ino.of(`/o/obj_${i}`)).toBe(n);
      kept.push(n, ino.of(`/o/tmp_${i}`));
    }
    expect(new Set(kept).size).toBe(kept.length);
  });
});
