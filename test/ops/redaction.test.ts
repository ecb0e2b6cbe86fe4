import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { REDACTED_PATHS } from '../../src/core/log.js';
import { CLI, run, startMount, startTestEmulator, type TestEmulator, type TestMount } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';
import { sandboxDir } from '../helpers/sandbox.js';

/**
 * Credentials never reach a log line or the journal: a secret planted in a service-account key
 * file, in the daemon's environment and in a hidden file is looked for in everything the daemon
 * wrote (stderr at debug, every file of the state directory) after a workload that pokes at it.
 */
const SECRET = `planted-${crypto.randomBytes(8).toString('hex')}`;

function keyFile(file: string): void {
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  fs.writeFileSync(file, JSON.stringify({
    type: 'service_account', project_id: 'ledgerfs-test', private_key_id: `${SECRET}-key-id`,
    private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }), client_email: `${SECRET}@ledgerfs-test.iam.gserviceaccount.com`, client_id: '1',
  }));
}

/** every secret-bearing string that must not show: the marker, and a slice of the private key */
function leaks(text: string, key: string): string[] {
  const pem = (JSON.parse(fs.readFileSync(key, 'utf8')) as { private_key: string }).private_key.split('\n')[5] as string;
  return [SECRET, pem].filter((s) => text.includes(s));
}

function everything(dir: string): string {
  let out = '';
  for (const e of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) out += fs.readFileSync(path.join(e.parentPath, e.name), 'latin1');
  }
  return out;
}

describe('redaction', () => {
  let m: TestMount | undefined;
  let emulator: TestEmulator | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await m?.stop();
    await emulator?.stop();
    if (dir) rmTemp(dir);
    m = emulator = dir = undefined;
  });

  it('pino redacts headers, tokens and keys wherever an object carries them', () => {
    const lines: string[] = [];
    const log = pino({ redact: { paths: [...REDACTED_PATHS], censor: '[redacted]' } }, { write: (s: string) => void lines.push(s) });
    log.warn({
      err: { config: { headers: { Authorization: `Bearer ${SECRET}` }, data: `assertion=${SECRET}` }, response: { config: { headers: { authorization: SECRET } } } },
      headers: { authorization: SECRET, Cookie: SECRET }, private_key: SECRET, creds: { access_token: SECRET, refresh_token: SECRET }, path: '/kept',
    }, 'a client failure');
    expect(lines.join('')).not.toContain(SECRET);
    expect(lines.join('')).toContain('/kept');
  });

  it('a local mount under a policy: hidden file, env var and key file stay out of the log (debug) and the journal', async () => {
    dir = makeTemp('redact');
    const ws = path.join(dir, 'ws');
    const state = path.join(dir, 'state');
    const key = path.join(dir, 'sa.json');
    keyFile(key);
    fs.mkdirSync(path.join(ws, 'w'), { recursive: true });
    fs.writeFileSync(path.join(ws, 'w/.env'), `API_TOKEN=${SECRET}\n`);
    fs.writeFileSync(path.join(ws, 'w/notes.txt'), 'notes\n');
    fs.writeFileSync(path.join(dir, 'p.yaml'), 'backend: {type: local, path: ./ws}\nroots: [{path: /w, mode: rw}]\nhide: ["**/.env"]\n');
    m = await startMount({
      src: ws, omitSource: true, env: { LEDGERFS_TEST_TOKEN: SECRET, GOOGLE_APPLICATION_CREDENTIALS: key },
      args: ['--policy', path.join(dir, 'p.yaml'), '--state', state, '--log-level', 'debug', '--metrics', '127.0.0.1:0'],
    });
    run([
      'cat w/.env', 'echo x >> w/.env', 'mv w/.env w/env2', 'ln w/.env w/env3', 'rm w/.env', 'ls -la w',
      'echo new > w/a.txt', 'mv w/a.txt w/b.txt', 'echo more >> w/notes.txt', 'truncate -s 2 w/notes.txt', 'rm w/b.txt',
      'mkdir w/d', 'touch w/d/.env', 'cat .ledgerfs/denials', 'cat .ledgerfs/policy',
    ].join('; '), m.mnt);
    const metrics = (JSON.parse(m.logs().split('\n').find((l) => l.includes('"metrics served"')) as string) as { metrics: string }).metrics;
    const scraped = await (await fetch(metrics)).text();
    await m.stop();
    const logs = m.logs();
    expect(logs).toMatch(/"level":20/); // debug lines were written
    expect(logs).toMatch(/denied by policy|does not exist/);
    expect(fs.readFileSync(path.join(ws, 'w/.env'), 'utf8')).toContain(SECRET); // the secret was there to leak
    expect(leaks(logs, key)).toEqual([]);
    expect(leaks(scraped, key)).toEqual([]);
    expect(leaks(everything(state), key)).toEqual([]);
    // the log for this mount: `ledgerfs log` output too
    const log = spawnSync(process.execPath, [CLI, 'log', '--state', state, '--json'], { encoding: 'utf8' });
    expect(log.status).toBe(0);
    expect(log.stdout.length).toBeGreaterThan(0);
    expect(leaks(log.stdout + log.stderr, key)).toEqual([]);
  });

  it('ledgerfs run (sandboxed, policy hiding .env, daemon at debug): the secret is in no output, log or journal', async () => {
    const sb = sandboxDir((src) => {
      fs.mkdirSync(path.join(src, 'w'));
      fs.writeFileSync(path.join(src, 'w/.env'), `API_TOKEN=${SECRET}\n`);
      fs.writeFileSync(path.join(src, 'w/notes.txt'), 'notes\n');
    });
    try {
      const key = path.join(sb.dir, 'sa.json');
      keyFile(key);
      const policy = path.join(sb.dir, 'p.yaml');
      fs.writeFileSync(policy, `backend: {type: local, path: ${sb.src}}\nroots: [{path: /w, mode: rw}]\nhide: ["**/.env"]\n`);
      const r = await sb.run(['--policy', policy, '--state', sb.state, '--log-level', 'debug', '--', 'bash', '-c',
        'cat w/.env; echo x >> w/.env; mv w/.env w/e2; ls -la w; echo new > w/a.txt; mv w/a.txt w/b.txt; echo more >> w/notes.txt; cat .ledgerfs/denials; true'],
        { env: { LEDGERFS_TEST_TOKEN: SECRET, GOOGLE_APPLICATION_CREDENTIALS: key } });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toMatch(/"level":20/); // the daemon's debug lines came through
      expect(fs.readFileSync(path.join(sb.src, 'w/.env'), 'utf8')).toContain(SECRET);
      expect(leaks(r.stdout + r.stderr, key)).toEqual([]);
      expect(leaks(everything(sb.state), key)).toEqual([]);
      expect(leaks(sb.cli(['log', '--state', sb.state, '--json']), key)).toEqual([]);
    } finally {
      sb.cleanup();
    }
  });

  it('GCS with a service-account key file: a refused start says why without the key', async () => {
    dir = makeTemp('redact-gcs');
    const key = path.join(dir, 'sa.json');
    keyFile(key);
    emulator = await startTestEmulator(['ledgerfs-redact']);
    fs.writeFileSync(path.join(dir, 'p.yaml'), `backend: {type: gcs, bucket: ledgerfs-redact, apiEndpoint: "${emulator.url}", keyFile: ${key}}\nroots: [{path: /, mode: rw}]\n`);
    fs.mkdirSync(path.join(dir, 'mnt'));
    // the key's token cannot be had (no such service account): the mount is refused
    const r = spawnSync(process.execPath, [CLI, 'mount', '--policy', path.join(dir, 'p.yaml'), '--state', path.join(dir, 'state'), '--log-level', 'debug', path.join(dir, 'mnt')], {
      encoding: 'utf8', timeout: 60_000, env: { ...process.env, LEDGERFS_TEST_TOKEN: SECRET },
    });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/bucket "ledgerfs-redact" cannot be used/);
    expect(leaks(r.stdout + r.stderr, key)).toEqual([]);
    if (fs.existsSync(path.join(dir, 'state'))) expect(leaks(everything(path.join(dir, 'state')), key)).toEqual([]);
  });
});
