import type { StoredBucket, StoredObject } from './store.js';

/*
 * JSON resources as the API returns them: int64 fields (generation, metageneration, size) are
 * decimal strings, times are RFC 3339, hashes base64.
 */

function etag(...parts: bigint[]): string {
  return Buffer.from(parts.join('/')).toString('base64');
}

export function objectResource(o: StoredObject, baseUrl: string): Record<string, unknown> {
  const enc = encodeURIComponent(o.name);
  const r: Record<string, unknown> = {
    kind: 'storage#object',
    id: `${o.bucket}/${o.name}/${o.generation}`,
    selfLink: `${baseUrl}/storage/v1/b/${o.bucket}/o/${enc}`,
    mediaLink: `${baseUrl}/download/storage/v1/b/${o.bucket}/o/${enc}?generation=${o.generation}&alt=media`,
    name: o.name,
    bucket: o.bucket,
    generation: o.generation.toString(),
    metageneration: o.metageneration.toString(),
    contentType: o.contentType,
    storageClass: 'STANDARD',
    size: String(o.data.length),
    crc32c: o.crc32c,
    etag: etag(o.generation, o.metageneration),
    timeCreated: o.timeCreated.toISOString(),
    updated: o.updated.toISOString(),
    timeStorageClassUpdated: o.timeCreated.toISOString(),
  };
  if (o.md5Hash !== undefined) r.md5Hash = o.md5Hash;
  if (o.componentCount !== undefined) r.componentCount = o.componentCount;
  for (const k of ['contentEncoding', 'contentDisposition', 'contentLanguage', 'cacheControl'] as const) {
    if (o[k] !== undefined) r[k] = o[k];
  }
  if (Object.keys(o.metadata).length > 0) r.metadata = { ...o.metadata };
  return r;
}

export function bucketResource(b: StoredBucket, baseUrl: string): Record<string, unknown> {
  return {
    kind: 'storage#bucket',
    selfLink: `${baseUrl}/storage/v1/b/${b.name}`,
    id: b.name,
    name: b.name,
    projectNumber: '0',
    metageneration: b.metageneration.toString(),
    location: 'US',
    locationType: 'multi-region',
    storageClass: 'STANDARD',
    etag: etag(b.metageneration),
    timeCreated: b.timeCreated.toISOString(),
    updated: b.timeCreated.toISOString(),
    iamConfiguration: { uniformBucketLevelAccess: { enabled: true } },
  };
}
