import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, py, startMount, type TestMount } from '../helpers/mount.js';
import { NEEDS_OWN_EMULATOR } from '../helpers/gcs-external.js';
import { snapshotTree } from '../helpers/tree.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';
import { REORG } from '../helpers/staged-reorg.js';

/**
 * Staged mode on GCS (issue 18): a reorganisation on `mount --staged` sends the bucket no write
 * request at all (the emulator's request log), apply makes the bucket what the program saw, and
 * rollback of the apply restores it.
 */

if (NEEDS_OWN_EMULATOR) console.warn(`test/gcs/staged.test.ts: ${NEEDS_OWN_EMULATOR}`);
describe.skipIf(!!NEEDS_OWN_EMULATOR)('gcs: staged mode', () => {
  let g: GcsFixture;
  let tmp: string;
  beforeAll(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ledgerfs-staged-gcs-'));
    g = await startGcsFixture('ledgerfs-staged');
  }, 120_000);
  afterAll(async () => {
    await g?.stop();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  const ledgerfs = (args: string[]) => {
    const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, LEDGERFS_GCS_ENDPOINT: g.emulator.url }, timeout: 120_000 });
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  };
  /** the bucket as a plain mount (no journal, no caches) shows it */
  const bucketTree = async (): Promise<Record<string, unknown>> => {
    const plain = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args: ['--no-journal', '--metadata-ttl', '0', '--attr-timeout', '0', '--entry-timeout', '0'] });
    try {
      return snapshotTree(plain.mnt);
    } finally {
      await plain.stop();
    }
  };

  it('no write request before apply; apply equals the view; rollback of the apply restores the bucket', { timeout: 300_000 }, async () => {
    const state = path.join(tmp, 'state');
    let m: TestMount | undefined = await startMount({
      gcs: { emulator: g.emulator, bucket: g.bucket },
      populate: (src) => {
        const w = (p: string, s: string) => {
          fs.mkdirSync(path.dirname(path.join(src, p)), { recursive: true });
          fs.writeFileSync(path.join(src, p), s);
        };
        w('cases/index.md', '# cases\n');
        w('cases/smith/report.txt', 'smith report\n');
        w('cases/jones/a.txt', 'jones a\n');
        w('cases/jones/deep/b.txt', 'jones b\n');
        w('cases/tmp.log', 'scratch\n');
      },
      args: ['--state', state, '--session', 'gcs-reorg', '--staged'],
    });
    let seen: Record<string, unknown>;
    const original = snapshotTree(m.mnt);
    // from the program's first change to the daemon's exit (an unmount flushes what it holds)
    const r0 = await g.requests();
    try {
      py(REORG, m.mnt);
      seen = snapshotTree(m.mnt);
    } finally {
      await m.stop();
      m = undefined;
    }
    const log = await g.requestLog(r0);
    const writes = log.filter((r) => r.method !== 'GET' && r.method !== 'HEAD').map((r) => `${r.method} ${decodeURIComponent(r.path + r.query)}`);
    console.log(`staged reorganisation on GCS, through unmount: ${log.length} request(s), ${writes.length} write(s)`);
    expect(writes, 'no write request reached the bucket before apply').toEqual([]);
    expect(seen['archive/2025/jones/deep/b.txt']).toBeDefined();
    expect(await bucketTree()).toEqual(original);

    const applied = ledgerfs(['apply', '--state', state, '--session', 'gcs-reorg', '--json']);
    expect(applied.status, applied.stderr + applied.stdout).toBe(0);
    const res = JSON.parse(applied.stdout) as { applySession: string };
    expect(await bucketTree(), 'the bucket is what the program saw').toEqual(seen);

    const undo = ledgerfs(['rollback', '--state', state, '--session', res.applySession]);
    expect(undo.status, undo.stderr + undo.stdout).toBe(0);
    expect(await bucketTree(), 'rollback of the apply restores the bucket').toEqual(original);
  });

  it('apply writes on the generation the session first read: a change made in the bucket after the check is refused (412), not overwritten', { timeout: 300_000 }, async () => {
    const state = path.join(tmp, 'state-gen');
    const bucket = g.storage.bucket(g.bucket);
    // another bucket's worth of names: this test's own directory
    const m: TestMount = await startMount({
      gcs: { emulator: g.emulator, bucket: g.bucket },
      populate: (src) => {
        fs.mkdirSync(path.join(src, 'gen'), { recursive: true });
        fs.writeFileSync(path.join(src, 'gen/index.md'), '# index\n');
        fs.writeFileSync(path.join(src, 'gen/tmp.log'), 'scratch\n');
      },
      args: ['--state', state, '--session', 'gcs-gen', '--staged'],
    });
    try {
      py(`
import os
os.remove('gen/tmp.log')
with open('gen/index.md', 'a') as f: f.write('- from the session\\n')
with open('gen/new.txt', 'w') as f: f.write('new from the session\\n')
`, m.mnt);
    } finally {
      await m.stop();
    }
    // the apply's first change (the delete of gen/tmp.log) is held 6 s by the emulator: after
    // its check, before it writes gen/index.md and gen/new.txt
    const stats = async () => ((await (await fetch(`${g.emulator.url}/_emulator/stats`)).json()) as { faultsInjected: number }).faultsInjected;
    const held = await stats();
    await g.fault({ status: 0, delayMs: 6000, method: 'DELETE', pathPrefix: `/storage/v1/b/${g.bucket}/o/gen/tmp.log`, count: 1 });
    const child = spawn(process.execPath, [CLI, 'apply', '--state', state, '--session', 'gcs-gen', '--json'], { env: { ...process.env, LEDGERFS_GCS_ENDPOINT: g.emulator.url } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    try {
      for (const end = Date.now() + 90_000; (await stats()) === held; ) {
        if (Date.now() > end) throw new Error(`the apply never reached the delete of gen/tmp.log: ${stderr}${stdout}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      await bucket.file('gen/index.md').save('# index, edited beside the mount\n', { resumable: false });
      await bucket.file('gen/new.txt').save('made beside the mount\n', { resumable: false });
      const code = await exited;
      expect(code, stderr + stdout).toBe(1);
    } finally {
      child.kill('SIGKILL');
      await g.clearFaults();
    }
    const r = JSON.parse(stdout) as { conflicts: unknown[]; late: Array<{ path: string; reason: string }>; applySession: string | null };
    expect(r.conflicts, 'the check found nothing').toEqual([]);
    expect(r.late.map((c) => c.path).sort()).toEqual(['/gen/index.md', '/gen/new.txt']);
    expect(r.late.find((c) => c.path === '/gen/index.md')?.reason).toMatch(/changed beside the mount while the apply ran; not overwritten \(ESTALE|\/gen\/index\.md: changed in the bucket since it was first read \(generation \d+ then, generation \d+ now\)/);
    const [index] = await bucket.file('gen/index.md').download();
    const [made] = await bucket.file('gen/new.txt').download();
    expect(index.toString(), 'not overwritten').toBe('# index, edited beside the mount\n');
    expect(made.toString(), 'not overwritten').toBe('made beside the mount\n');
    const [tmpLog] = await bucket.file('gen/tmp.log').exists();
    expect(tmpLog, 'the rest was applied').toBe(false);
  });

  it('apply of a frozen, still mounted session on GCS: the daemon applies it, the bucket and the mount show what the program saw, rollback after unmount restores it', { timeout: 300_000 }, async () => {
    const state = path.join(tmp, 'state-live');
    const m: TestMount = await startMount({
      gcs: { emulator: g.emulator, bucket: g.bucket },
      populate: (src) => {
        fs.mkdirSync(path.join(src, 'live/jones'), { recursive: true });
        fs.writeFileSync(path.join(src, 'live/index.md'), '# live\n');
        fs.writeFileSync(path.join(src, 'live/jones/a.txt'), 'jones a\n');
        fs.writeFileSync(path.join(src, 'live/tmp.log'), 'scratch\n');
      },
      args: ['--state', state, '--session', 'gcs-live', '--staged', '--attr-timeout', '30', '--entry-timeout', '30'],
    });
    const under = (t: Record<string, unknown>) => Object.fromEntries(Object.entries(t).filter(([k]) => k === 'live' || k.startsWith('live/')));
    let original: Record<string, unknown>;
    let seen: Record<string, unknown>;
    let applySession: string;
    try {
      original = under(snapshotTree(m.mnt));
      py(`
import os
os.rename('live/jones', 'live/jones-closed')
os.remove('live/tmp.log')
with open('live/index.md', 'a') as f: f.write('- applied live\\n')
with open('live/new.txt', 'w') as f: f.write('new\\n')
`, m.mnt);
      seen = under(snapshotTree(m.mnt));
      expect(ledgerfs(['freeze', '--state', state]).status).toBe(0);
      const r = ledgerfs(['apply', '--state', state, '--session', 'gcs-live', '--json']);
      expect(r.status, r.stderr + r.stdout).toBe(0);
      applySession = (JSON.parse(r.stdout) as { applySession: string }).applySession;
      expect(applySession).toMatch(/^apply-/);
      expect(under(snapshotTree(m.mnt)), 'the mount shows the applied bucket').toEqual(seen);
      expect(under(await bucketTree()), 'the bucket is what the program saw').toEqual(seen);
    } finally {
      await m.stop();
    }
    const undo = ledgerfs(['rollback', '--state', state, '--session', applySession]);
    expect(undo.status, undo.stderr + undo.stdout).toBe(0);
    expect(under(await bucketTree()), 'rollback of the live apply restores the bucket').toEqual(original);
  });
});
