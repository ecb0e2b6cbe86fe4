import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startGcsEmulator, type GcsEmulator } from '../../src/dev/gcs-emulator/index.js';
import { clientFor } from '../helpers/gcs-emulator.js';
import { startMount, type TestMount } from '../helpers/mount.js';

/**
 * Faults under a mount: the emulator runs in this process so it can be stopped and restarted on
 * the same data and port; tools therefore run asynchronously (a synchronous child would block
 * the emulator's event loop). The backend retries 6 times over about 3 s (DEFAULTS.gcs).
 */
const BUCKET = 'ledgerfs-faults';

interface Done {
  code: number | null;
  stdout: string;
  stderr: string;
}

function start(cmd: string, cwd: string): { done: Promise<Done>; stdout: () => string } {
  const c = spawn('bash', ['-c', cmd], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  c.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  c.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => c.kill('SIGKILL'), 60_000);
  const done = new Promise<Done>((r) => c.on('exit', (code) => (clearTimeout(timer), r({ code, stdout, stderr }))));
  return { done, stdout: () => stdout };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function eventually(fn: () => boolean, ms: number, what: string): Promise<void> {
  const t0 = Date.now();
  while (!fn()) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

describe('gcs: faults under a mount', () => {
  let emu: GcsEmulator;
  let m: TestMount;
  let state: string;
  const big = crypto.randomBytes(3 * 1024 * 1024 + 123);
  const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex');

  beforeEach(async () => {
    emu = await startGcsEmulator();
    emu.store.createBucket(BUCKET, 'test');
    await clientFor(emu.url, { retries: false }).bucket(BUCKET).file('big.bin').save(big, { resumable: false });
    state = fs.mkdtempSync('/tmp/ledgerfs-faults-state-');
    const handle = { url: emu.url, pid: process.pid, stop: () => emu.stop() };
    m = await startMount({ gcs: { emulator: handle, bucket: BUCKET }, args: ['--state', path.join(state, 's'), '--metadata-ttl', '0.2'] });
  });
  afterEach(async () => {
    await m?.stop();
    await emu?.stop();
    fs.rmSync(state, { recursive: true, force: true });
  });

  async function restart(): Promise<void> {
    emu = await startGcsEmulator({ port: emu.port, store: emu.store });
  }

  it('emulator stopped and restarted under a reader and a writer: both finish, nothing lost', async () => {
    const data = crypto.randomBytes(2 * 1024 * 1024);
    const src = path.join(m.dir, 'new.src');
    fs.writeFileSync(src, data);
    await emu.stop();
    const reader = start('sha256sum big.bin', m.mnt);
    const writer = start(`cp ${src} new.bin`, m.mnt);
    await sleep(1500);
    await restart();
    const [r, w] = await Promise.all([reader.done, writer.done]);
    expect(r.stderr).toBe('');
    expect(r.stdout.split(' ')[0]).toBe(sha(big));
    expect(w).toMatchObject({ code: 0, stderr: '' });
    const [stored] = await clientFor(emu.url, { retries: false }).bucket(BUCKET).file('new.bin').download();
    expect(sha(stored)).toBe(sha(data));
  }, 60_000);

  it('an outage longer than the retries: close(2) fails with EIO, the written bytes are kept in the conflict area', async () => {
    const gate = path.join(m.dir, 'gate');
    const py = `
import errno, os, sys, time
f = open('precious.txt', 'wb')
f.write(b'precious bytes\\n'); f.flush()
print('written', flush=True)
while not os.path.exists(${JSON.stringify(gate)}): time.sleep(0.05)
try:
    f.close(); print('closed')
except OSError as e:
    print(errno.errorcode[e.errno])
`;
    fs.writeFileSync(path.join(m.dir, 'w.py'), py);
    const w = start(`python3 ${m.dir}/w.py`, m.mnt);
    await eventually(() => w.stdout().includes('written'), 20_000, 'the writer');
    await emu.stop();
    fs.writeFileSync(gate, '');
    const r = await w.done;
    expect(r.stdout).toBe('written\nEIO\n');
    // kept (reason upload-failed) before close(2) answered EIO, not later by the release
    const conflicts = path.join(state, 's', 'conflicts');
    expect(fs.existsSync(conflicts) && fs.readdirSync(conflicts).some((f) => f.endsWith('.json'))).toBe(true);
    const note = fs.readdirSync(conflicts).find((f) => f.endsWith('.json')) as string;
    expect(JSON.parse(fs.readFileSync(path.join(conflicts, note), 'utf8'))).toMatchObject({ reason: 'upload-failed', path: '/precious.txt' });
    expect(fs.readFileSync(path.join(conflicts, note.replace(/\.json$/, '')), 'utf8')).toBe('precious bytes\n');
    await restart();
  }, 60_000);

  it('injected 503s and slow responses: reads and writes succeed through the retries', async () => {
    for (const f of [
      { status: 503, count: 4 },
      { status: 0, delayMs: 400, count: 3 },
      { status: 503, count: 2, pathPrefix: '/upload/' },
    ]) emu.faults.add(f);
    const r = await start('sha256sum big.bin && printf retried > small.txt && cat small.txt', m.mnt).done;
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(`${sha(big)}  big.bin\nretried`);
    expect(emu.stats().faultsInjected).toBe(9);
    const [stored] = await clientFor(emu.url, { retries: false }).bucket(BUCKET).file('small.txt').download();
    expect(stored.toString()).toBe('retried');
  }, 60_000);
});
