import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGcsEmulator, type GcsEmulator } from '../../src/dev/gcs-emulator/index.js';

/*
 * Node's HTTP clients drop an idle keep-alive socket after 5 s (http.globalAgent's timeout). The
 * emulator closed its end after 5 s too, so a request sent on a socket idle for about 5 s could
 * meet the server's close and fail with "socket hang up": a test's client, which does not retry,
 * failed so under load (test/gcs/staged.test.ts, a download after an apply held 6 s). GCS keeps
 * idle connections far longer than clients do; so does the emulator now, and the client closes first.
 */
describe('gcs emulator: idle keep-alive connections', () => {
  let emu: GcsEmulator;
  beforeAll(async () => {
    emu = await startGcsEmulator();
    emu.store.createBucket('ledgerfs-keepalive', 'test');
  });
  afterAll(async () => {
    await emu?.stop();
  });

  const get = (agent: http.Agent) =>
    new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
      const req = http.get(`${emu.url}/storage/v1/b/ledgerfs-keepalive/o`, { agent }, (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, reused: req.reusedSocket }));
      });
      req.on('error', reject);
    });

  it('keeps a connection idle for longer than a client does (6 s) open for its next request', { timeout: 20_000 }, async () => {
    // an agent that keeps its idle socket longer than the server, as a client that reuses late
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1, timeout: 30_000 });
    try {
      expect(await get(agent)).toEqual({ status: 200, reused: false });
      await new Promise((r) => setTimeout(r, 6000));
      expect(await get(agent), 'the same socket served the second request').toEqual({ status: 200, reused: true });
    } finally {
      agent.destroy();
    }
  });
});
