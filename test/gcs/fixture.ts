import { Storage } from '@google-cloud/storage';
import { clientFor } from '../helpers/gcs-emulator.js';
import { EXTERNAL_GCS_ENDPOINT, externalBucketName } from '../helpers/gcs-external.js';
import { externalEmulator, startTestEmulator, type TestEmulator } from '../helpers/mount.js';

/** An emulator process with one bucket, a real client on it, and its request counter. */
export interface GcsFixture {
  emulator: TestEmulator;
  bucket: string;
  storage: Storage;
  /** requests the emulator has answered so far (admin calls not counted) */
  requests(): Promise<number>;
  /** the requests answered after the `since`-th (the emulator's log; see its README) */
  requestLog(since: number): Promise<Array<{ seq: number; method: string; path: string; query: string }>>;
  fault(spec: unknown): Promise<void>;
  clearFaults(): Promise<void>;
  /** upload `names` (each with `data`), `concurrency` at a time */
  seed(names: string[], data?: string, concurrency?: number): Promise<void>;
  /** each object's name and text, but the journal mirror's (.ledgerfs/), and directory placeholders only with `placeholders` */
  objects(opts?: { placeholders?: boolean }): Promise<Record<string, string>>;
  stop(): Promise<void>;
}

/**
 * With LEDGERFS_TEST_GCS_ENDPOINT the fixture is a fresh bucket (named after `bucket`) on that
 * server, and the admin calls (requests, fault, clearFaults) throw: tests that need them skip
 * there (NEEDS_OWN_EMULATOR).
 */
export async function startGcsFixture(base = 'ledgerfs-gcs-test'): Promise<GcsFixture> {
  const bucket = EXTERNAL_GCS_ENDPOINT ? externalBucketName(base) : base;
  const emulator = EXTERNAL_GCS_ENDPOINT ? await externalEmulator([bucket]) : await startTestEmulator([bucket]);
  const storage = clientFor(emulator.url, { retries: false });
  const admin = async (method: string, what: string, body?: unknown) => {
    if (EXTERNAL_GCS_ENDPOINT) throw new Error(`/_emulator/${what} is the project emulator's; ${emulator.url} (LEDGERFS_TEST_GCS_ENDPOINT) has none`);
    const r = await fetch(`${emulator.url}/_emulator/${what}`, { method, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
    if (!r.ok) throw new Error(`admin ${method} ${what}: ${r.status} ${await r.text()}`);
    return r.status === 204 ? undefined : r.json();
  };
  return {
    emulator,
    bucket,
    storage,
    requests: async () => ((await admin('GET', 'stats')) as { requests: number }).requests,
    requestLog: async (since) => ((await admin('GET', `requests?since=${since}`)) as { requests: Array<{ seq: number; method: string; path: string; query: string }> }).requests,
    fault: async (spec) => void (await admin('POST', 'faults', spec)),
    clearFaults: async () => void (await admin('DELETE', 'faults')),
    // Simple media uploads of the JSON API through fetch: the client library's save() (streams,
    // hash validation) cost about 6 ms of this process's CPU an object, over a minute for the
    // 13,000 objects of caches.test.ts on a loaded machine; what is seeded is not what is tested.
    seed: async (names, data = 'x', concurrency = 32) => {
      let next = 0;
      const body = Buffer.from(data);
      const upload = async (name: string) => {
        const r = await fetch(`${emulator.url}/upload/storage/v1/b/${encodeURIComponent(bucket)}/o?uploadType=media&name=${encodeURIComponent(name)}`, {
          method: 'POST',
          headers: { 'content-type': 'application/octet-stream' },
          body,
        });
        if (!r.ok) throw new Error(`seeding ${name}: ${r.status} ${await r.text()}`);
        await r.arrayBuffer();
      };
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next < names.length) await upload(names[next++] as string);
        }),
      );
    },
    objects: async ({ placeholders = true } = {}) => {
      const [files] = await storage.bucket(bucket).getFiles();
      const out: Record<string, string> = {};
      for (const f of files) {
        if (f.name.startsWith('.ledgerfs/') || (!placeholders && f.name.endsWith('/'))) continue;
        out[f.name] = (await f.download())[0].toString();
      }
      return out;
    },
    stop: () => emulator.stop(),
  };
}
