import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NEEDS_OWN_EMULATOR } from '../helpers/gcs-external.js';
import { startMount, type TestMount } from '../helpers/mount.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/**
 * Issue 21, "EIO that was not a failure": an emulator outage of 0.5-10 s while a program closes a
 * file it wrote. close(2) may succeed or fail with EIO, but the answer must be the truth:
 *  - EIO: the old object is still in the bucket, and the new bytes are in the state directory's
 *    conflicts/ with a .json note, already when close returns;
 *  - success: the new object is in the bucket and no kept copy exists;
 *  - never both, also later: the final check runs after every retry the daemon could still have
 *    had in flight would have landed (before the fix, the release after an EIO close uploaded
 *    the bytes once GCS was back, and no note was written).
 * Outages alternate between 503 answers and dropped connections (the emulator's
 * /_emulator/outage). The daemon runs with the default retry policy (6 tries, about 1.5-3 s).
 *
 * LEDGERFS_OUTAGE_ROUNDS=50 is the bar (about 4 minutes); the default is a shorter run.
 * LEDGERFS_OUTAGE_SEED replays a sequence of outage lengths.
 */
const ROUNDS = Number(process.env.LEDGERFS_OUTAGE_ROUNDS ?? 12);
const SEED = Number(process.env.LEDGERFS_OUTAGE_SEED ?? 21);
const BUCKET = 'ledgerfs-close-outage';

/** A writer that opens, writes and closes files on command, one line each, answering one line. */
const WRITER = `
import errno, os, sys
fd = None
for line in sys.stdin:
    cmd, *rest = line.split()
    try:
        if cmd == 'write':
            fd = os.open(rest[0], os.O_WRONLY | os.O_TRUNC)
            os.write(fd, bytes.fromhex(rest[1]))
            print('written', flush=True)
        elif cmd == 'close':
            f, fd = fd, None
            os.close(f)
            print('ok', flush=True)
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)), flush=True)
`;

/** xorshift: the outage lengths of a run are reproducible from its seed */
function prng(seed: number): () => number {
  let x = seed | 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

/** mostly short outages (the retries outlast them), some around the retry budget, a few long ones */
function outageMs(rand: () => number): number {
  const r = rand();
  if (r < 0.4) return 500 + rand() * 1500;
  if (r < 0.8) return 2000 + rand() * 3000;
  return 5000 + rand() * 5000;
}

interface Round {
  name: string;
  old: string;
  now: string;
  outageMs: number;
  mode: 'status' | 'reset';
  answer?: string;
}

interface Note {
  reason: string;
  path: string;
  localFile: string;
}

if (NEEDS_OWN_EMULATOR) console.warn(`test/gcs/close-outage.test.ts: ${NEEDS_OWN_EMULATOR}`);
describe.skipIf(!!NEEDS_OWN_EMULATOR)('gcs: close(2) during an emulator outage', () => {
  let g: GcsFixture;
  let m: TestMount;
  let stateRoot: string;
  let writer: ChildProcess | undefined;
  let answers: AsyncIterator<string>;
  const rounds: Round[] = [];
  const rand = prng(SEED);

  beforeAll(async () => {
    g = await startGcsFixture(BUCKET);
    for (let i = 0; i < ROUNDS; i++) {
      const old = `old ${i} ${'o'.repeat(Math.floor(rand() * 40))}\n`;
      const now = `new ${i} ${'n'.repeat(Math.floor(rand() * 40))}\n`;
      rounds.push({ name: `r${i}.txt`, old, now, outageMs: outageMs(rand), mode: i % 2 ? 'reset' : 'status' });
    }
    const b = g.storage.bucket(g.bucket);
    for (const r of rounds) await b.file(r.name).save(r.old, { resumable: false });
    stateRoot = fs.mkdtempSync('/tmp/ledgerfs-outage-state-');
    m = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args: ['--state', path.join(stateRoot, 's')] });
    writer = spawn('python3', ['-c', WRITER], { cwd: m.mnt, stdio: ['pipe', 'pipe', 'inherit'] });
    answers = createInterface({ input: writer.stdout as NodeJS.ReadableStream })[Symbol.asyncIterator]();
  }, 120_000);

  afterAll(async () => {
    if (writer && writer.exitCode === null) writer.kill('SIGKILL');
    await m?.stop();
    await g?.stop();
    if (stateRoot) fs.rmSync(stateRoot, { recursive: true, force: true });
  });

  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  async function ask(line: string, timeoutMs = 60_000): Promise<string> {
    (writer?.stdin as NodeJS.WritableStream).write(`${line}\n`);
    const timer = new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer to "${line}" within ${timeoutMs} ms`)), timeoutMs).unref());
    const r = await Promise.race([answers.next(), timer]);
    if (r.done) throw new Error(`the writer ended before answering "${line}"`);
    return r.value;
  }

  async function outage(ms: number, mode: Round['mode']): Promise<number> {
    const r = await fetch(`${g.emulator.url}/_emulator/outage`, { method: 'POST', body: JSON.stringify({ ms, ...(mode === 'reset' ? { reset: true } : {}) }) });
    if (!r.ok) throw new Error(`outage: ${r.status} ${await r.text()}`);
    return ((await r.json()) as { outage: { until: number } }).outage.until;
  }

  const conflictsDir = () => path.join(stateRoot, 's', 'conflicts');
  function notes(): Map<string, Note> {
    const out = new Map<string, Note>();
    if (!fs.existsSync(conflictsDir())) return out;
    for (const f of fs.readdirSync(conflictsDir()).filter((n) => n.endsWith('.json'))) {
      const n = JSON.parse(fs.readFileSync(path.join(conflictsDir(), f), 'utf8')) as Note;
      if (out.has(n.path)) throw new Error(`two kept copies of ${n.path}`);
      out.set(n.path, n);
    }
    return out;
  }
  const stored = async (name: string) => (await g.storage.bucket(g.bucket).file(name).download())[0].toString();

  const about = (r: Round) => `${r.name} (outage ${Math.round(r.outageMs)} ms, ${r.mode}, close: ${r.answer})`;

  /** the kept copy: there, with the new bytes, exactly when close said EIO */
  function checkKept(r: Round, kept: Map<string, Note>): void {
    const note = kept.get(`/${r.name}`);
    if (r.answer === 'ok') {
      expect(note, about(r)).toBeUndefined();
    } else {
      expect(r.answer, about(r)).toBe('EIO');
      expect(note, about(r)).toMatchObject({ reason: 'upload-failed', path: `/${r.name}` });
      expect(fs.readFileSync((note as Note).localFile, 'utf8'), about(r)).toBe(r.now);
    }
  }

  /** the bucket: the new object after a successful close, the old one after EIO */
  async function checkBucket(r: Round): Promise<void> {
    expect(await stored(r.name), about(r)).toBe(r.answer === 'ok' ? r.now : r.old);
  }

  it(`${ROUNDS} closes under outages of 0.5-10 s: EIO iff the old object stays and the new bytes are kept`, async () => {
    for (const r of rounds) {
      expect(await ask(`write ${r.name} ${Buffer.from(r.now).toString('hex')}`)).toBe('written');
      const until = await outage(r.outageMs, r.mode);
      await sleep(rand() * 200); // the close starts a little into the outage
      r.answer = await ask('close');
      // as the program sees it when close returns (GCS may still be down)
      checkKept(r, notes());
      // the next round opens its file with GCS up
      const left = until - Date.now();
      if (left > 0) await sleep(left + 100);
      await checkBucket(r);
    }
    // Longer than the retries of a release (or any late attempt) could still take: what is in
    // the bucket now is what stays.
    await sleep(5000);
    const kept = notes();
    for (const r of rounds) {
      checkKept(r, kept);
      await checkBucket(r);
    }
    expect(kept.size).toBe(rounds.filter((r) => r.answer === 'EIO').length);
    const counts = { ok: rounds.filter((r) => r.answer === 'ok').length, eio: kept.size };
    console.log(`close under outage: ${ROUNDS} rounds, ${counts.ok} closes succeeded, ${counts.eio} EIO (seed ${SEED})`);
    // the run must have exercised both answers, or it proved nothing
    if (ROUNDS >= 10) expect(counts.ok > 0 && counts.eio > 0).toBe(true);
  }, 120_000 + ROUNDS * 15_000);
});
