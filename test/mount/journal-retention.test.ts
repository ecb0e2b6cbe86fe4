import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LocalBackend } from '../../src/backend/local.js';
import { silentLogger } from '../../src/core/log.js';
import { JournalService } from '../../src/journal/service.js';
import { CLI, logsMatching, sh, startMount, type TestMount } from '../helpers/mount.js';
import { vfsFs } from '../helpers/journal.js';
import { putFiles } from '../helpers/policy.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/** the first run's delay here (30 s by default): long enough for the look at the sessions before it on a loaded machine */
const FIRST_MS = 6000;

/** A mount file's `journal:` retention, applied by the running mount; gc --max-bytes through the daemon. */
describe('mount: journal retention from the mount file', () => {
  it(`drops the oldest whole sessions in the background (first run ${FIRST_MS / 1000} s after the start here, LEDGERFS_RETENTION_FIRST_MS), never the mounted one, and logs it`, async () => {
    const dir = makeTemp('retention-mount');
    const ws = path.join(dir, 'ws');
    const state = path.join(dir, 'state');
    putFiles(ws, { 'w/a.txt': 'a\n' });
    // two older sessions, written before the mount (as earlier mounts would have)
    for (const s of ['old-1', 'old-2']) {
      const svc = await JournalService.open({ stateDir: state, backend: new LocalBackend(ws), source: ws, session: s, actor: 'test', role: 'test', log: silentLogger });
      await vfsFs.write(svc.attachDirect(), `/w/${s}.txt`, 'x'.repeat(50_000));
      await svc.close();
    }
    fs.writeFileSync(path.join(dir, 'p.yaml'), `backend: {type: local, path: ./ws}\nroots: [{path: /w, mode: rw}]\nstate: ./state\njournal: {maxBytes: 1KiB}\n`);
    let m: TestMount | undefined;
    const sessions = () => {
      const r = spawnSync(process.execPath, [CLI, 'log', '--state', state, '--json'], { encoding: 'utf8' });
      return [...new Set((JSON.parse(r.stdout) as { session?: string }[]).map((o) => o.session))].sort();
    };
    try {
      const started = Date.now();
      m = await startMount({ src: ws, omitSource: true, args: ['--policy', path.join(dir, 'p.yaml'), '--session', 'live'], env: { LEDGERFS_RETENTION_FIRST_MS: String(FIRST_MS) } });
      sh('echo b > w/b.txt', m.mnt);
      expect(sessions()).toEqual(['live', 'old-1', 'old-2']);
      const line = await logsMatching(m, /journal retention: dropped/, 90_000);
      expect(Date.now() - started, 'the first run waits its delay').toBeGreaterThanOrEqual(FIRST_MS);
      expect(line).toMatch(/dropped 2 session\(s\) \(old-1, old-2\)/);
      expect(sessions()).toEqual(['live']);
      // gc --max-bytes through the daemon: the mounted session is the user's to drop, and is kept whole
      const gc = spawnSync(process.execPath, [CLI, 'gc', '--state', state, '--max-bytes', '1', '--json'], { encoding: 'utf8' });
      expect(gc.status, gc.stderr).toBe(0);
      expect((JSON.parse(gc.stdout) as { maxBytes: number }).maxBytes).toBe(1);
      expect(m.errors()).toEqual([]);
    } finally {
      await m?.stop();
      rmTemp(dir);
    }
  }, 180_000);
});
