import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/** `ledgerfs mount` on a bucket it cannot use stops at once with a sentence naming the bucket. */
describe('gcs: mount refuses a bucket it cannot use, clearly', () => {
  let g: GcsFixture;
  let dir: string;
  beforeAll(async () => {
    g = await startGcsFixture();
    dir = makeTemp('gcs-setup');
    fs.mkdirSync(path.join(dir, 'mnt'));
  });
  afterAll(async () => {
    await g?.stop();
    rmTemp(dir);
  });

  const mount = (yaml: string, env: NodeJS.ProcessEnv = {}) => {
    const file = path.join(dir, 'ws.yaml');
    fs.writeFileSync(file, yaml);
    return spawnSync(process.execPath, [CLI, 'mount', '--policy', file, '--state', path.join(dir, 'state'), path.join(dir, 'mnt')], {
      encoding: 'utf8', timeout: 60_000, env: { ...process.env, ...env },
    });
  };

  it('a bucket that does not exist', () => {
    const r = mount(`backend: {type: gcs, bucket: no-such-bucket, apiEndpoint: "${g.emulator.url}"}\nroots: [{path: /}]\n`);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('ws.yaml: backend: GCS bucket "no-such-bucket" does not exist');
  });

  it('a key file that is not there', () => {
    const r = mount(`backend: {type: gcs, bucket: ${g.bucket}, keyFile: ./missing-key.json}\nroots: [{path: /}]\n`);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`no usable Google Cloud credentials for bucket "${g.bucket}": check that the key file .*missing-key\\.json exists`));
  });

  it('an endpoint that takes the connection and never answers: mount --daemon says so, and the daemon exits', async () => {
    await g.fault({ status: 0, delayMs: 90_000, count: -1, method: 'GET', pathPrefix: `/storage/v1/b/${g.bucket}` });
    try {
      const t0 = Date.now();
      const r = spawnSync(process.execPath, [CLI, 'mount', '--daemon', '--source', `gs://${g.bucket}`, '--state', path.join(dir, 'state3'), path.join(dir, 'mnt')], {
        encoding: 'utf8', timeout: 80_000, env: { ...process.env, LEDGERFS_GCS_ENDPOINT: g.emulator.url, LEDGERFS_GCS_SETUP_TIMEOUT_MS: '2000' },
      });
      expect(r.stderr).toMatch(new RegExp(`GCS bucket "${g.bucket}" could not be reached: no answer from http://127\\.0\\.0\\.1:\\d+ within 2 s\n$`));
      expect(r.status).toBe(2);
      expect(Date.now() - t0).toBeLessThan(20_000);
    } finally {
      await g.clearFaults();
    }
  });

  it('--source gs:// names the bucket the same way', () => {
    const r = spawnSync(process.execPath, [CLI, 'mount', '--source', 'gs://absent-bucket/ws', '--state', path.join(dir, 'state2'), path.join(dir, 'mnt')], {
      encoding: 'utf8', timeout: 60_000, env: { ...process.env, LEDGERFS_GCS_ENDPOINT: g.emulator.url },
    });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('GCS bucket "absent-bucket" does not exist');
  });
});
