import { spawnSync } from 'node:child_process';
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
});
