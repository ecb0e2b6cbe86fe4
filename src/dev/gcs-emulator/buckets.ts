import { badRequest } from './errors.js';
import { json, parseJsonBody, type Reply, type RequestContext } from './http.js';
import { bucketResource } from './resource.js';
import type { EmulatorStore } from './store.js';

/** POST /storage/v1/b?project=P with {"name": ...}: buckets are created as against real GCS. */
export function createBucket(store: EmulatorStore, ctx: RequestContext): Reply {
  const body = parseJsonBody(ctx);
  if (typeof body.name !== 'string' || body.name === '') throw badRequest('Required field: name', 'required');
  const b = store.createBucket(body.name, ctx.query.get('project') ?? '');
  return json(bucketResource(b, ctx.baseUrl));
}

export function getBucket(store: EmulatorStore, ctx: RequestContext, name: string): Reply {
  return json(bucketResource(store.bucket(name), ctx.baseUrl));
}

export function listBuckets(store: EmulatorStore, ctx: RequestContext): Reply {
  const project = ctx.query.get('project');
  const items = [...store.buckets.values()]
    .filter((b) => !project || !b.project || b.project === project)
    .sort((a, b) => (a.name < b.name ? -1 : 1))
    .map((b) => bucketResource(b, ctx.baseUrl));
  return json({ kind: 'storage#buckets', ...(items.length ? { items } : {}) });
}

export function deleteBucket(store: EmulatorStore, name: string): Reply {
  store.deleteBucket(name);
  return { status: 204 };
}
