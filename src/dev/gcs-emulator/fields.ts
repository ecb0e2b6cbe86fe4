import { badRequest } from './errors.js';
import { WRITABLE_FIELD_NAMES, type StoredObject, type WritableFields } from './store.js';

/*
 * Object resource fields a request body may carry, read leniently (unknown fields are ignored,
 * as GCS ignores output-only ones) but typed strictly: custom metadata values become strings.
 */

function stringMap(v: unknown, where: string): Record<string, string> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw badRequest(`Invalid value for ${where}: expected an object`);
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v as Record<string, unknown>)) {
    if (val === null || val === undefined) continue;
    out[k] = typeof val === 'string' ? val : JSON.stringify(val);
  }
  return out;
}

/** Fields for a new object (insert, compose destination, rewrite override). */
export function writableFieldsFrom(body: Record<string, unknown>): WritableFields {
  const f: WritableFields = {};
  for (const k of WRITABLE_FIELD_NAMES) {
    const v = body[k];
    if (typeof v === 'string') f[k] = v;
  }
  if (body.metadata !== undefined && body.metadata !== null) f.metadata = stringMap(body.metadata, 'metadata');
  return f;
}

/** objects.patch: only the given fields change; null clears a field or a metadata key. */
export function applyPatch(o: StoredObject, body: Record<string, unknown>): void {
  for (const k of WRITABLE_FIELD_NAMES) {
    if (!(k in body)) continue;
    const v = body[k];
    if (v === null) delete o[k];
    else if (typeof v === 'string') o[k] = v;
    else throw badRequest(`Invalid value for ${k}`);
  }
  if ('metadata' in body) {
    const m = body.metadata;
    if (m === null) {
      o.metadata = {};
    } else {
      if (typeof m !== 'object' || Array.isArray(m)) throw badRequest('Invalid value for metadata');
      for (const [key, val] of Object.entries(m as Record<string, unknown>)) {
        if (val === null) delete o.metadata[key];
        else o.metadata[key] = typeof val === 'string' ? val : JSON.stringify(val);
      }
    }
  }
  if (!o.contentType) o.contentType = 'application/octet-stream';
}

/** objects.update: the writable fields are replaced as a whole by the body's. */
export function applyUpdate(o: StoredObject, body: Record<string, unknown>): void {
  const f = writableFieldsFrom(body);
  for (const k of WRITABLE_FIELD_NAMES) {
    if (f[k] === undefined) delete o[k];
    else o[k] = f[k];
  }
  o.metadata = f.metadata ?? {};
  if (!o.contentType) o.contentType = 'application/octet-stream';
}
