import { spawn } from 'node:child_process';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI, run, startMount, type TestMount } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/** `ledgerfs log --follow --json`: records stream as a live mount journals them, and resume from a seq. */

interface Rec {
  kind: string;
  seq?: number;
  of?: number;
  op?: string;
  paths?: string[];
}

function follower(args: string[]) {
  const c = spawn(process.execPath, [CLI, 'log', '--follow', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  c.stdout.on('data', (d: Buffer) => (out += d.toString()));
  c.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((r) => c.on('exit', (code) => r(code)));
  return {
    records: () => out.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Rec),
    text: () => out,
    stop: async () => {
      c.kill('SIGINT');
      const code = await exited;
      return { code, err };
    },
  };
}

const until = async (cond: () => boolean, ms = 10_000) => {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
};

describe('ledgerfs log --follow', () => {
  let m: TestMount | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await m?.stop();
    if (dir) rmTemp(dir);
    m = dir = undefined;
  });

  it('streams records as they are journaled, and resumes from --since SEQ', async () => {
    dir = makeTemp('follow');
    const state = path.join(dir, 'state');
    m = await startMount({ args: ['--state', state] });
    const f = follower(['--state', state, '--json']);
    // it is watching once a marker made now shows (a fixed wait lost the race on a busy host)
    for (let i = 0; i < 100 && !f.records().some((r) => r.op === 'create' && r.paths?.[0] === '/ready'); i++) {
      run('rm -f ready && touch ready', m.mnt);
      await until(() => f.records().some((r) => r.op === 'create' && r.paths?.[0] === '/ready'), 300);
    }
    run('echo one > a.txt && mkdir d && mv a.txt d/b.txt', m.mnt);
    await until(() => f.records().some((r) => r.kind === 'op' && r.op === 'rename'));
    const { code, err } = await f.stop();
    expect(err).toBe('');
    expect(code).toBe(0);
    const all = f.records().filter((r) => r.kind === 'op' && !r.paths?.includes('/ready'));
    // The bytes written through the creating handle usually belong to the create (its end record
    // says so), unless the create's outcome reached the disk before the write came (a busy host):
    // then they are a write session of their own. Both are true journals of the same thing.
    expect(all.filter((r) => r.op === 'write').map((r) => r.paths)).toEqual(all.some((r) => r.op === 'write') ? [['/a.txt']] : []);
    const ops = all.filter((r) => r.op !== 'write');
    expect(ops.map((r) => [r.op, r.paths])).toEqual([['create', ['/a.txt']], ['mkdir', ['/d']], ['rename', ['/a.txt', '/d/b.txt']]]);
    // every op's outcome follows it
    for (const op of ops) expect(f.records().some((r) => r.of === op.seq && r.kind !== 'capture')).toBe(true);
    // nothing from before it started (the mount's own start record came earlier)
    expect(f.records().some((r) => r.kind === 'start')).toBe(false);

    // a consumer that stopped after the create resumes from the mkdir
    const mkdirSeq = (ops[1] as Rec).seq as number;
    const g = follower(['--state', state, '--json', '--since', String(mkdirSeq)]);
    await until(() => g.records().filter((r) => r.kind === 'op').length >= 2);
    await g.stop();
    expect(g.records().filter((r) => r.kind === 'op').map((r) => r.op)).toEqual(['mkdir', 'rename']);
    // and people get one line a record
    const h = follower(['--state', state, '--since', '1']);
    await until(() => /rename \/a\.txt -> \/d\/b\.txt/.test(h.text()));
    await h.stop();
    expect(h.text()).toMatch(/^#\d+ .*create \/a\.txt$/m);
  });
});
