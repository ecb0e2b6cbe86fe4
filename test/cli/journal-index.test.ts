import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, REPO } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/** The CLI answers the same whether the journal index is missing, warm or damaged (a journal from scripts/gen-journal, dist/). */
describe('journal index: log, diff and rollback --dry-run answer the same with and without it', () => {
  let dir: string;
  let src: string;
  let state: string;
  const cli = (...args: string[]) => {
    const r = spawnSync(process.execPath, [CLI, ...args, '--source', src, '--state', state], { encoding: 'utf8', maxBuffer: 64 << 20 });
    return { status: r.status, out: r.stdout, err: r.stderr };
  };
  const index = () => path.join(state, 'journal-index.json');

  beforeAll(() => {
    dir = makeTemp('cli-jindex');
    src = path.join(dir, 'src');
    state = path.join(dir, 'state');
    const g = spawnSync(process.execPath, [path.join(REPO, 'scripts/gen-journal'), '--state', state, '--source', src, '--records', '6000', '--sessions', '12'], { encoding: 'utf8' });
    expect(g.status, g.stderr).toBe(0);
  }, 60_000);
  afterAll(() => rmTemp(dir));

  const commands: string[][] = [
    ['log', '--session', 'gen-000005'],
    ['log', '--session', 'gen-000005', '--json'],
    ['log', '--path', '/s7'],
    ['log', '--path', '/s7/f3'],
    ['log', '--since', '2000', '--limit', '5'],
    ['diff', '--session', 'gen-000003', '--json'],
    ['rollback', '--dry-run', '--session', 'gen-000004', '--json'],
    ['rollback', '--dry-run', '--to', '2900', '--json'],
    ['log', '--session', 'gen-00004'],
  ];

  it('gives identical output cold (no index), warm, and with a damaged index', () => {
    const run = () => commands.map((c) => cli(...c));
    fs.rmSync(index(), { force: true });
    const cold = run();
    expect(fs.existsSync(index())).toBe(true);
    const warm = run();
    fs.writeFileSync(index(), fs.readFileSync(index(), 'utf8').replace('gen-000005', 'gen-000006'));
    const damaged = run();
    expect(warm).toEqual(cold);
    expect(damaged).toEqual(cold);
    expect(cold[0]?.out.split('\n').length).toBeGreaterThan(100);
    expect(cold[8]?.err).toMatch(/no such session in this journal; nearest: gen-000004/);
  }, 120_000);

  it('log --session and --path say what the whole log says of them', () => {
    const all = JSON.parse(cli('log', '--json').out) as { session?: string; paths?: string[]; seq?: number }[];
    const session = JSON.parse(cli('log', '--session', 'gen-000005', '--json').out) as unknown[];
    expect(session).toEqual(all.filter((op) => op.session === 'gen-000005'));
    const byPath = JSON.parse(cli('log', '--path', '/s7', '--json').out) as unknown[];
    expect(byPath).toEqual(all.filter((op) => op.paths?.some((p) => p === '/s7' || p.startsWith('/s7/'))));
    expect(byPath.length).toBeGreaterThan(0);
  }, 60_000);
});
