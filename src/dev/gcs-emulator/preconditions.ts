import { badRequest, notModified, preconditionFailed } from './errors.js';

/** The four generation/metageneration conditions of a request (for the object or its source). */
export interface Preconditions {
  ifGenerationMatch?: bigint;
  ifGenerationNotMatch?: bigint;
  ifMetagenerationMatch?: bigint;
  ifMetagenerationNotMatch?: bigint;
}

interface HasGenerations {
  generation: bigint;
  metageneration: bigint;
}

function int64(query: URLSearchParams, key: string): bigint | undefined {
  const v = query.get(key);
  if (v === null || v === '') return undefined;
  if (!/^-?\d+$/.test(v)) throw badRequest(`Invalid value for ${key}: ${v}`);
  return BigInt(v);
}

/**
 * Read conditions from the query string. `prefix` selects the source conditions of copy/rewrite
 * (`ifSourceGenerationMatch`, ...).
 */
export function parsePreconditions(query: URLSearchParams, prefix: '' | 'Source' = ''): Preconditions {
  const p: Preconditions = {};
  const g = int64(query, `if${prefix}GenerationMatch`);
  const gn = int64(query, `if${prefix}GenerationNotMatch`);
  const m = int64(query, `if${prefix}MetagenerationMatch`);
  const mn = int64(query, `if${prefix}MetagenerationNotMatch`);
  if (g !== undefined) p.ifGenerationMatch = g;
  if (gn !== undefined) p.ifGenerationNotMatch = gn;
  if (m !== undefined) p.ifMetagenerationMatch = m;
  if (mn !== undefined) p.ifMetagenerationNotMatch = mn;
  return p;
}

/**
 * Evaluate conditions against the live object (undefined: no live object).
 *
 * As the GCS docs state them: `ifGenerationMatch=0` means "only if there is no live object";
 * any other match value requires a live object with that generation; "not match" conditions
 * fail when the live object has that value. A failed condition is 412 Precondition Failed,
 * except that a failed *NotMatch on a read is 304 Not Modified (HTTP's If-None-Match rule).
 * Reads of a missing object are 404 before any condition is looked at (the caller's job).
 */
export function checkPreconditions(o: HasGenerations | undefined, p: Preconditions, kind: 'read' | 'write'): void {
  if (p.ifGenerationMatch !== undefined) {
    const ok = p.ifGenerationMatch === 0n ? o === undefined : o !== undefined && o.generation === p.ifGenerationMatch;
    if (!ok) throw preconditionFailed(`ifGenerationMatch=${p.ifGenerationMatch}`);
  }
  if (p.ifMetagenerationMatch !== undefined) {
    if (!o || o.metageneration !== p.ifMetagenerationMatch) throw preconditionFailed(`ifMetagenerationMatch=${p.ifMetagenerationMatch}`);
  }
  const notMatchFailed = (what: string) => (kind === 'read' ? notModified() : preconditionFailed(what));
  if (p.ifGenerationNotMatch !== undefined) {
    const live = o ? o.generation : 0n;
    if (live === p.ifGenerationNotMatch) throw notMatchFailed(`ifGenerationNotMatch=${p.ifGenerationNotMatch}`);
  }
  if (p.ifMetagenerationNotMatch !== undefined && o && o.metageneration === p.ifMetagenerationNotMatch) {
    throw notMatchFailed(`ifMetagenerationNotMatch=${p.ifMetagenerationNotMatch}`);
  }
}
