import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGcsEmulator } from '../../src/dev/gcs-emulator/index.js';
import { clientFor, startEmulatorFixture, type EmulatorFixture } from '../helpers/gcs-emulator.js';

// Fault injection (admin endpoint), restarts on the same store, and the CLI entry point.

let fx: EmulatorFixture;

/*
 * Client quirk (v7.22): a save() without preconditions turns `retryOptions.autoRetry` off on
 * its Storage object for good (see the last test below). Tests that rely on the client's
 * retries therefore use a fresh client.
 */
const retrying = () => clientFor(fx.emu.url).bucket('faults');

beforeAll(async () => {
  fx = await startEmulatorFixture();
  await fx.storage.createBucket('faults');
});
afterAll(async () => fx?.stop());

const bucket = () => fx.storage.bucket('faults');

describe('fault injection', () => {
  it('a 503 is retried by the client and the request then succeeds', async () => {
    await bucket().file('f1').save('x', { resumable: false });
    const before = await fx.stats();
    await fx.fault({ status: 503, count: 1, method: 'GET', pathPrefix: '/storage/v1/b/faults/o/f1' });
    const [m] = await retrying().file('f1').getMetadata();
    expect(m.name).toBe('f1');
    const after = await fx.stats();
    expect(after.faultsInjected - before.faultsInjected).toBe(1);
    expect(after.requests - before.requests).toBe(2);
  });

  it('faults match by method and path prefix (raw or percent-decoded), and count down', async () => {
    await bucket().file('dir/f2').save('x', { resumable: false });
    await fx.fault({ status: 500, count: 2, method: 'GET', pathPrefix: '/storage/v1/b/faults/o/dir/' });
    const noRetry = clientFor(fx.emu.url, { retries: false }).bucket('faults');
    await expect(noRetry.file('dir/f2').getMetadata()).rejects.toMatchObject({ code: 500 });
    await expect(noRetry.file('f1').getMetadata()).resolves.toBeDefined(); // other path: untouched
    await expect(noRetry.file('dir/f2').getMetadata()).rejects.toMatchObject({ code: 500 });
    await expect(noRetry.file('dir/f2').getMetadata()).resolves.toBeDefined(); // used up
  });

  it('429 carries the rate-limit reason', async () => {
    await fx.fault({ status: 429, method: 'GET' });
    const noRetry = clientFor(fx.emu.url, { retries: false }).bucket('faults');
    await expect(noRetry.file('f1').getMetadata()).rejects.toMatchObject({ code: 429, errors: [{ reason: 'rateLimitExceeded' }] });
  });

  it('"after" faults apply the request, then fail the response (a lost response)', async () => {
    await fx.fault({ status: 503, when: 'after', method: 'POST', pathPrefix: '/upload/' });
    const noRetry = clientFor(fx.emu.url, { retries: false }).bucket('faults');
    await expect(noRetry.file('lost').save('landed', { resumable: false })).rejects.toMatchObject({ code: 503 });
    expect((await bucket().file('lost').download())[0].toString()).toBe('landed');
  });

  it('delays slow a request down without failing it', async () => {
    await fx.fault({ status: 0, delayMs: 300, method: 'GET' });
    const t0 = Date.now();
    await bucket().file('f1').getMetadata();
    expect(Date.now() - t0).toBeGreaterThanOrEqual(290);
  });

  it('a reset drops the connection; the client retries it', async () => {
    await fx.fault({ reset: true, method: 'GET', pathPrefix: '/storage/v1/b/faults/o/f1' });
    const [m] = await retrying().file('f1').getMetadata();
    expect(m.name).toBe('f1');
  });

  it('a resumable upload survives a 503 on a chunk (the client asks where to resume)', async () => {
    const data = randomBytes(1024 * 1024);
    await fx.fault({ status: 503, method: 'PUT', pathPrefix: '/upload/' });
    // With a precondition, as the client retries uploads only then (RetryConditional).
    await retrying().file('resumed.bin').save(data, { resumable: true, chunkSize: 256 * 1024, preconditionOpts: { ifGenerationMatch: 0 } });
    expect((await bucket().file('resumed.bin').download())[0].equals(data)).toBe(true);
  });

  it('client quirk: an unconditional save() switches off retries for its whole Storage object', async () => {
    const storage = clientFor(fx.emu.url);
    expect(storage.retryOptions.autoRetry).toBe(true);
    await storage.bucket('faults').file('quirk').save('x', { resumable: false });
    expect(storage.retryOptions.autoRetry).toBe(false);
    await fx.fault({ status: 503, method: 'GET', pathPrefix: '/storage/v1/b/faults/o/quirk' });
    await expect(storage.bucket('faults').file('quirk').getMetadata()).rejects.toMatchObject({ code: 503 });
  });

  it('an outage fails every request before it takes effect (503, or a dropped connection), then ends by itself', async () => {
    const noRetry = clientFor(fx.emu.url, { retries: false }).bucket('faults');
    const outage = (body: unknown) => fetch(`${fx.emu.url}/_emulator/outage`, { method: 'POST', body: JSON.stringify(body) });
    expect((await outage({ ms: 600 })).status).toBe(200);
    await expect(noRetry.file('f1').getMetadata()).rejects.toMatchObject({ code: 503 });
    await expect(noRetry.file('during-503').save('x', { resumable: false, preconditionOpts: { ifGenerationMatch: 0 } })).rejects.toMatchObject({ code: 503 });
    // admin calls still answer during the outage
    expect(((await (await fetch(`${fx.emu.url}/_emulator/outage`)).json()) as { outage: unknown }).outage).toMatchObject({ status: 503, reset: false });
    // ends by itself: wait for the emulator to say so (polled, not one fixed sleep)
    const over = async () => ((await (await fetch(`${fx.emu.url}/_emulator/outage`)).json()) as { outage: unknown }).outage === null;
    for (let i = 0; i < 200 && !(await over()); i++) await new Promise((r) => setTimeout(r, 20));
    expect(await over()).toBe(true);
    await expect(noRetry.file('f1').getMetadata()).resolves.toBeDefined();
    await outage({ ms: 10_000, reset: true });
    const dropped = await noRetry.file('during-reset').save('x', { resumable: false, preconditionOpts: { ifGenerationMatch: 0 } }).catch((e: Error) => e);
    expect(dropped).toBeInstanceOf(Error);
    expect(String((dropped as Error).message)).toMatch(/socket hang up|ECONNRESET|other side closed/i);
    expect((await fetch(`${fx.emu.url}/_emulator/outage`, { method: 'DELETE' })).status).toBe(204);
    // nothing sent during either outage landed
    for (const name of ['during-503', 'during-reset']) expect((await noRetry.file(name).exists())[0]).toBe(false);
    expect((await outage({ ms: -1 })).status).toBe(400);
  });

  it('faults can be listed and cleared', async () => {
    await fx.fault([{ status: 503, count: 5, pathPrefix: '/never/' }, { status: 502, count: -1, pathPrefix: '/never/' }]);
    const listed = (await (await fetch(`${fx.emu.url}/_emulator/faults`)).json()) as { rules: unknown[] };
    expect(listed.rules).toHaveLength(2);
    await fx.clearFaults();
    const again = (await (await fetch(`${fx.emu.url}/_emulator/faults`)).json()) as { rules: unknown[] };
    expect(again.rules).toHaveLength(0);
  });
});

describe('lifecycle', () => {
  it('stops, and restarts on the same port and store with the data intact', async () => {
    const emu = await startGcsEmulator();
    const storage = clientFor(emu.url);
    const [b] = await storage.createBucket('restart');
    await b.file('kept').save('still here', { resumable: false });
    await emu.stop();
    const down = await clientFor(emu.url, { retries: false }).bucket('restart').file('kept').getMetadata().catch((e: { code?: string }) => e.code);
    expect(['ECONNREFUSED', 'ECONNRESET']).toContain(down);
    const again = await startGcsEmulator({ port: emu.port, store: emu.store });
    try {
      expect(again.url).toBe(emu.url);
      expect((await storage.bucket('restart').file('kept').download())[0].toString()).toBe('still here');
    } finally {
      await again.stop();
    }
  });

  it('runs from the command line: node dist/dev/gcs-emulator/main.js --port 0 --bucket NAME', async () => {
    const main = path.resolve(import.meta.dirname, '../../dist/dev/gcs-emulator/main.js');
    const child = spawn(process.execPath, [main, '--port', '0', '--bucket', 'from-cli'], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout }).once('line', resolve);
        child.once('exit', (code) => reject(new Error(`emulator exited early with ${code}`)));
      });
      const { url } = JSON.parse(line) as { url: string };
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const storage = clientFor(url);
      await storage.bucket('from-cli').file('hello').save('hi', { resumable: false });
      expect((await storage.bucket('from-cli').file('hello').download())[0].toString()).toBe('hi');
      // Buckets can also be made as against real GCS.
      await storage.createBucket('made-by-client');
    } finally {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    }
  });

  it('a stop ends the waits of delayed faults: the process exits at once, not when the delay would end', async () => {
    const main = path.resolve(import.meta.dirname, '../../dist/dev/gcs-emulator/main.js');
    const child = spawn(process.execPath, [main, '--port', '0', '--bucket', 'held'], { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    try {
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout }).once('line', resolve);
        child.once('exit', (code) => reject(new Error(`emulator exited early with ${code}`)));
      });
      const { url } = JSON.parse(line) as { url: string };
      const admin = await fetch(`${url}/_emulator/faults`, { method: 'POST', body: JSON.stringify({ status: 503, delayMs: 60_000, count: -1, method: 'GET' }) });
      expect(admin.ok).toBe(true);
      // a request the fault holds for a minute (its connection is reset by the stop)
      const held = fetch(`${url}/storage/v1/b/held/o`).then(() => 'answered', () => 'reset');
      // the emulator counts the request before it waits
      for (let i = 0; i < 200; i++) {
        const st = (await (await fetch(`${url}/_emulator/stats`)).json()) as { requests: number };
        if (st.requests >= 1) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      const t0 = Date.now();
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(Date.now() - t0, 'exited at once, not after the fault\'s minute').toBeLessThan(10_000);
      expect(await held).toBe('reset');
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  }, 30_000);
});
