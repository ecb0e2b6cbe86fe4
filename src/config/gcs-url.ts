import type { GcsBackendConfig } from './load.js';

/**
 * `--source gs://BUCKET[/PREFIX]`: a GCS workspace without a policy file (the whole bucket or
 * prefix, read-write, as `--source DIR` is for a directory). The emulator or another endpoint
 * comes from LEDGERFS_GCS_ENDPOINT (e.g. http://127.0.0.1:4443); credentials are
 * Application Default Credentials. Returns undefined for anything that is not a gs:// URL.
 * (Not STORAGE_EMULATOR_HOST: @google-cloud/storage takes that as its full base URL, with
 * `/storage/v1`, and would also apply it to every other client in the process.)
 */
export function gcsSource(source: string | undefined, env: NodeJS.ProcessEnv = process.env): GcsBackendConfig | undefined {
  if (source === undefined || !source.startsWith('gs://')) return undefined;
  const rest = source.slice('gs://'.length);
  const slash = rest.indexOf('/');
  const bucket = slash < 0 ? rest : rest.slice(0, slash);
  const prefix = slash < 0 ? '' : rest.slice(slash + 1).replace(/^\/+|\/+$/g, '');
  const endpoint = env.LEDGERFS_GCS_ENDPOINT;
  return {
    type: 'gcs',
    bucket,
    ...(prefix ? { prefix } : {}),
    ...(endpoint ? { apiEndpoint: /^https?:\/\//.test(endpoint) ? endpoint : `http://${endpoint}` } : {}),
  };
}

/** The location string a GCS workspace's journal directory is derived from (matches GcsBackend.location). */
export function gcsLocation(b: GcsBackendConfig): string {
  return `gs://${b.bucket}/${normalizePrefix(b.prefix ?? '')}`;
}

/** "", "/", "ws", "/ws/", "a//b/" -> "" or "ws/" or "a/b/": the prefix objects are named under. */
export function normalizePrefix(p: string): string {
  const parts = p.split('/').filter((s) => s !== '');
  for (const s of parts) {
    if (s === '.' || s === '..') throw new Error(`GCS backend: prefix ${JSON.stringify(p)} may not contain "." or ".."`);
  }
  return parts.length ? parts.join('/') + '/' : '';
}
