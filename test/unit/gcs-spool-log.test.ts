import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { readSpool, SpoolLog, type SpoolEntry } from '../../src/backend/gcs/spool-log.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

// The upload spool's log (durability journal): what a close appends is what a restart finds,
// a crash's torn tail is dropped, the closes of one turn share one fdatasync, and segments go
// once every version in them landed.

let dir: string;
beforeEach(() => {
  dir = path.join(makeTemp('spool-log'), 'upload-spool');
});
afterEach(() => {
  vi.restoreAllMocks();
  rmTemp(path.dirname(dir));
});

const entry = (key: string, size: number, base = '0'): SpoolEntry => ({ key, path: `/${key}`, size, metadata: { m: key }, baseGeneration: base, baseMetageneration: '0', enqueuedAt: 1 });
const bytesAt = (v: { bytes: { file: string; offset: number }; entry: SpoolEntry }) => {
  const b = Buffer.alloc(v.entry.size);
  const fd = fs.openSync(v.bytes.file, 'r');
  fs.readSync(fd, b, 0, b.length, v.bytes.offset);
  fs.closeSync(fd);
  return b.toString();
};

describe('SpoolLog', () => {
  it('a restart finds the versions not done, in order, with their bytes and their latest base', async () => {
    const log = new SpoolLog(dir, 1 << 20);
    expect(log.open()).toEqual([]);
    log.appendVersion('a1', entry('a', 3), Buffer.from('aaa'));
    log.appendVersion('b1', entry('b', 2), Buffer.from('bb'));
    log.appendVersion('a2', entry('a', 4), Buffer.from('AAAA'));
    log.appendVersion('c1', entry('c', 1), Buffer.from('c'));
    log.appendDone('b1', 1);
    // a1 landed as generation 7: a2 is based on it, and a1 is done by the same record
    log.appendBase('a2', '7', '1', 'a1');
    await log.durable();
    // a crash: no close(), the next daemon replays
    const again = new SpoolLog(dir, 1 << 20);
    const vs = again.open();
    expect(vs.map((v) => v.id)).toEqual(['a2', 'c1']);
    expect(vs[0]?.entry).toMatchObject({ key: 'a', baseGeneration: '7', baseMetageneration: '1' });
    expect(vs.map(bytesAt)).toEqual(['AAAA', 'c']);
    again.close();
  });

  it('a rename and an attribute change of queued versions replay with the versions (one record each; a sync makes them durable)', async () => {
    const log = new SpoolLog(dir, 1 << 20);
    log.open();
    log.appendVersion('t1', entry('tmp', 3), Buffer.from('obj'));
    log.appendVersion('t2', entry('tmp', 4), Buffer.from('obj2'));
    log.appendVersion('o1', entry('other', 1), Buffer.from('o'));
    await log.durable();
    const renamed = log.appendRename(['t1', 't2'], 'objects/ab', '/objects/ab', '9', '2');
    const amended = log.appendMetadata('t2', { m: 'tmp', mode: '444' });
    expect(log.isSynced(renamed) || log.isSynced(amended)).toBe(false);
    await log.durable();
    expect(log.isSynced(renamed) && log.isSynced(amended)).toBe(true);
    // a crash: the next daemon uploads both versions under the new name, the first on the
    // generation the rename replaced, the second with the new attributes
    const again = new SpoolLog(dir, 1 << 20);
    const vs = again.open();
    expect(vs.map((v) => [v.id, v.entry.key, v.entry.path])).toEqual([
      ['t1', 'objects/ab', '/objects/ab'],
      ['t2', 'objects/ab', '/objects/ab'],
      ['o1', 'other', '/other'],
    ]);
    expect(vs[0]?.entry).toMatchObject({ baseGeneration: '9', baseMetageneration: '2', metadata: { m: 'tmp' } });
    expect(vs[1]?.entry.metadata).toEqual({ m: 'tmp', mode: '444' });
    expect(vs.map(bytesAt)).toEqual(['obj', 'obj2', 'o']);
    again.close();
  });

  it('a torn last record (its sync never returned) is dropped and cut off; appends after it replay', async () => {
    const log = new SpoolLog(dir, 1 << 20);
    log.open();
    log.appendVersion('x', entry('x', 5), Buffer.from('xxxxx'));
    log.appendVersion('y', entry('y', 5), Buffer.from('yyyyy'));
    await log.durable();
    const seg = path.join(dir, fs.readdirSync(dir).find((n) => n.endsWith('.log')) as string);
    fs.truncateSync(seg, fs.statSync(seg).size - 2); // y's last bytes never reached the disk
    const again = new SpoolLog(dir, 1 << 20);
    expect(again.open().map((v) => v.id)).toEqual(['x']);
    again.appendVersion('z', entry('z', 1), Buffer.from('z'));
    await again.durable();
    expect(readSpool(dir).versions.map((v) => v.id)).toEqual(['x', 'z']);
    // a flipped byte in a record is caught by its checksum, not read as data
    const seg2 = path.join(dir, fs.readdirSync(dir).filter((n) => n.endsWith('.log')).sort().pop() as string);
    const raw = fs.readFileSync(seg2);
    raw[raw.length - 1] ^= 0xff;
    fs.writeFileSync(seg2, raw);
    expect(readSpool(dir).versions.map((v) => v.id)).toEqual(['x']);
  });

  it('written with zeros ahead of its end (a sync rewrites blocks the file has): readers stop at the zeros, a restart cuts them off', async () => {
    const log = new SpoolLog(dir, 1 << 20, 4096);
    log.open();
    const seg = () => path.join(dir, fs.readdirSync(dir).filter((n) => n.endsWith('.log')).sort().pop() as string);
    log.appendVersion('p', entry('p', 5), Buffer.from('ppppp'));
    await log.durable();
    expect(fs.statSync(seg()).size).toBe(4096); // one record, and the zeros after it
    expect(readSpool(dir).versions.map((v) => v.id)).toEqual(['p']); // what `ledgerfs status` reads meanwhile
    log.appendVersion('q', entry('q', 5000), Buffer.alloc(5000, 'q')); // past the zeros: more of them
    await log.durable();
    expect(fs.statSync(seg()).size).toBe(8192);
    expect(readSpool(dir).versions.map((v) => v.id)).toEqual(['p', 'q']);
    // a crash mid-record: its head made it, its body did not (the zeros are still there)
    log.appendVersion('r', entry('r', 3), Buffer.from('rrr'));
    const raw = fs.readFileSync(seg());
    const rAt = raw.lastIndexOf(Buffer.from('{"t":"v","id":"r"')) - 16;
    fs.writeFileSync(seg(), Buffer.concat([raw.subarray(0, rAt + 20), Buffer.alloc(raw.length - rAt - 20)]));
    const before = seg();
    const again = new SpoolLog(dir, 1 << 20, 4096);
    const vs = again.open();
    expect(vs.map((v) => v.id)).toEqual(['p', 'q']);
    expect(vs.map(bytesAt)).toEqual(['ppppp', 'q'.repeat(5000)]);
    expect(fs.statSync(before).size).toBe(rAt); // the torn record and the zeros cut off
    again.appendVersion('s', entry('s', 1), Buffer.from('s'));
    await again.durable();
    expect(readSpool(dir).versions.map((v) => v.id)).toEqual(['p', 'q', 's']);
    again.close();
  });

  it('the closes of one turn of the event loop share one fdatasync', async () => {
    const log = new SpoolLog(dir, 1 << 20);
    log.open();
    const sync = vi.spyOn(fs, 'fdatasync');
    const waits = [];
    for (let i = 0; i < 10; i++) {
      log.appendVersion(`v${i}`, entry(`k${i}`, 1), Buffer.from('v'));
      waits.push(log.durable());
    }
    await Promise.all(waits);
    expect(sync).toHaveBeenCalledTimes(1);
    // one close alone: one sync of its own
    log.appendVersion('w', entry('w', 1), Buffer.from('w'));
    await log.durable();
    expect(sync).toHaveBeenCalledTimes(2);
    log.close();
  });

  it('the done records of one turn go to the disk in one write after it, in order with the records around them', async () => {
    const log = new SpoolLog(dir, 1 << 20);
    log.open();
    for (let i = 0; i < 10; i++) log.appendVersion(`v${i}`, entry(`k${i}`, 1), Buffer.from(`${i}`));
    await log.durable();
    const writes = () => vi.mocked(fs.writevSync).mock.calls.length + vi.mocked(fs.writeSync).mock.calls.length;
    vi.spyOn(fs, 'writevSync');
    vi.spyOn(fs, 'writeSync');
    for (let i = 0; i < 7; i++) log.appendDone(`v${i}`, 1); // seven uploads landed in one turn
    expect(writes()).toBe(0);
    await new Promise((r) => setImmediate(r));
    expect(writes()).toBe(1);
    expect(readSpool(dir).versions.map((v) => v.id)).toEqual(['v7', 'v8', 'v9']);
    // a base record is written at once, behind the done record before it
    log.appendDone('v7', 1);
    log.appendBase('v9', '5', '1');
    expect(writes()).toBe(3);
    expect(readSpool(dir).versions.map((v) => [v.id, v.entry.baseGeneration])).toEqual([['v8', '0'], ['v9', '5']]);
    // so is a version, each in one write
    log.appendDone('v8', 1);
    log.appendVersion('w', entry('w', 2), Buffer.from('ww'));
    expect(writes()).toBe(5);
    expect(readSpool(dir).versions.map((v) => v.id)).toEqual(['v9', 'w']);
    // and a sync writes what waits before it syncs
    log.appendDone('v9', 1);
    await log.durable();
    expect(readSpool(dir).versions.map((v) => v.id)).toEqual(['w']);
    log.close();
  });

  it('segments are removed once every version in them and before them is done; an empty spool is left empty at close', async () => {
    const log = new SpoolLog(dir, 64); // every version rolls to a new segment
    log.open();
    for (let i = 0; i < 4; i++) log.appendVersion(`v${i}`, entry(`k${i}`, 100), Buffer.alloc(100, i));
    await log.durable();
    const logs = () => fs.readdirSync(dir).filter((n) => n.endsWith('.log')).length;
    expect(logs()).toBe(4);
    log.appendDone('v1', 2); // not the oldest: nothing can go yet
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 20));
    expect(logs()).toBe(4);
    log.appendDone('v0', 1);
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 20));
    expect(logs()).toBe(2); // segments 1 and 2
    expect(readSpool(dir).versions.map((v) => v.id)).toEqual(['v2', 'v3']);
    log.appendDone('v2', 3);
    log.appendDone('v3', 4);
    log.close();
    expect(fs.readdirSync(dir)).toEqual([]);
  });

  it('reads the spool an older daemon left as <id>.json + <id>.data', () => {
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, '0001-old.json'), JSON.stringify(entry('old', 3)));
    fs.writeFileSync(path.join(dir, '0001-old.data'), 'old');
    fs.writeFileSync(path.join(dir, '0002-orphan.data'), 'never acknowledged');
    const log = new SpoolLog(dir, 1 << 20);
    const vs = log.open();
    expect(vs.map((v) => [v.id, bytesAt(v)])).toEqual([['0001-old', 'old']]);
    expect(fs.existsSync(path.join(dir, '0002-orphan.data'))).toBe(false);
    log.close();
  });
});
