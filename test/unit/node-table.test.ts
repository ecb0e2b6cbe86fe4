import { describe, expect, it } from 'vitest';
import { NodeTable, ROOT_ID } from '../../src/fuse/node-table.js';

const file = (ino: number, nlink = 1) => ({ ino, nlink, dir: false });
const dir = (ino: number) => ({ ino, nlink: 2, dir: true });

describe('NodeTable: hard links as one node (byInode)', () => {
  it('a second name of an inode gets the same id; unlinking the first keeps the node at the other name', () => {
    const t = new NodeTable(true);
    const a = t.ref(ROOT_ID, 'a', 1, file(10));
    const b = t.ref(ROOT_ID, 'b', 1, file(10, 2));
    expect(b?.id).toBe(a?.id);
    expect(t.path(a!.id)).toBe('/a');
    t.removed(ROOT_ID, 'a');
    expect(t.path(a!.id)).toBe('/b');
    // a rename of its only name moves it; a directory never shares
    const d = t.ref(ROOT_ID, 'd', 1, dir(20));
    t.moved(ROOT_ID, 'b', d!.id, 'c');
    expect(t.path(a!.id)).toBe('/d/c');
    expect(t.ref(ROOT_ID, 'e', 1, dir(20))?.id).not.toBe(d?.id);
    // the last name gone: detached, and a new file with the reused inode is a new node
    t.removed(d!.id, 'c');
    expect(t.path(a!.id)).toBeNull();
    expect(t.ref(ROOT_ID, 'n', 1, file(10, 2))?.id).not.toBe(a?.id);
  });

  it('moving an alias keeps the path; forgetting the node drops every name', () => {
    const t = new NodeTable(true);
    const a = t.ref(ROOT_ID, 'a', 1, file(7))!;
    t.ref(ROOT_ID, 'b', 1, file(7, 2));
    t.moved(ROOT_ID, 'b', ROOT_ID, 'c');
    expect(t.path(a.id)).toBe('/a');
    expect(t.childPath(ROOT_ID, 'c')).toBe('/c');
    expect(t.ref(ROOT_ID, 'c', 0, file(7, 2))?.id).toBe(a.id);
    t.forget(a.id, 2);
    expect(t.get(a.id)).toBeUndefined();
    expect(t.size).toBe(1);
    // a name replaced beside the mount (another inode there now) is a new node
    const x = t.ref(ROOT_ID, 'x', 1, file(8))!;
    expect(t.ref(ROOT_ID, 'x', 1, file(9))?.id).not.toBe(x.id);
  });

  it('without byInode every name is its own node (GCS: inode numbers from paths)', () => {
    const t = new NodeTable(false);
    expect(t.ref(ROOT_ID, 'a', 1, file(3))?.id).not.toBe(t.ref(ROOT_ID, 'b', 1, file(3, 2))?.id);
  });
});
