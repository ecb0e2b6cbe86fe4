import { randomUUID } from 'node:crypto';
import { crc32cBase64, md5Base64 } from './hashes.js';
import { badRequest, conflict, noSuchBucket, noSuchObject } from './errors.js';
import { NameIndex } from './name-index.js';
import { checkPreconditions, type Preconditions } from './preconditions.js';
import type { ObjectRateLimiter } from './object-rate.js';

/** Object fields a client may set (insert metadata, patch, update, compose/rewrite destination). */
export interface WritableFields {
  contentType?: string;
  contentEncoding?: string;
  contentDisposition?: string;
  contentLanguage?: string;
  cacheControl?: string;
  /** custom metadata; values are strings (GCS stringifies) */
  metadata?: Record<string, string>;
}

export const WRITABLE_FIELD_NAMES = ['contentType', 'contentEncoding', 'contentDisposition', 'contentLanguage', 'cacheControl'] as const;

export interface StoredObject extends WritableFields {
  bucket: string;
  name: string;
  data: Buffer;
  generation: bigint;
  metageneration: bigint;
  timeCreated: Date;
  updated: Date;
  crc32c: string;
  /** absent for composite objects, as in GCS */
  md5Hash?: string;
  componentCount?: number;
  metadata: Record<string, string>;
}

export interface StoredBucket {
  name: string;
  project: string;
  timeCreated: Date;
  metageneration: bigint;
  objects: Map<string, StoredObject>;
  /** the same names, sorted for listing */
  index: NameIndex;
}

/** A resumable upload session: bytes committed so far, and what to create when complete. */
export interface UploadSession {
  id: string;
  bucket: string;
  name: string;
  fields: WritableFields;
  preconditions: Preconditions;
  chunks: Buffer[];
  committed: number;
  /** the finished object, once the last byte arrived (later status queries answer 200 with it) */
  result?: StoredObject;
}

/**
 * The emulator's state: buckets, objects, upload sessions. Kept apart from the HTTP server so a
 * test can stop the server and start a new one on the same store (a restart that keeps data).
 * No object versioning: each name has only its live generation, as gcsfuse and ledgerfs assume.
 */
export class EmulatorStore {
  readonly buckets = new Map<string, StoredBucket>();
  readonly uploads = new Map<string, UploadSession>();
  private lastGeneration = 0n;
  /** GCS's per-object mutation rate (object-rate.ts); undefined: unlimited (the default) */
  objectRate: ObjectRateLimiter | undefined;

  /** Generations are microsecond timestamps, strictly increasing, as GCS's are in practice. */
  nextGeneration(): bigint {
    const now = BigInt(Date.now()) * 1000n;
    this.lastGeneration = now > this.lastGeneration ? now : this.lastGeneration + 1n;
    return this.lastGeneration;
  }

  createBucket(name: string, project: string): StoredBucket {
    if (!/^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$/.test(name)) throw badRequest(`Invalid bucket name: '${name}'`);
    if (this.buckets.has(name)) {
      throw conflict('Your previous request to create the named bucket succeeded and you already own it.');
    }
    const b: StoredBucket = { name, project, timeCreated: new Date(), metageneration: 1n, objects: new Map(), index: new NameIndex() };
    this.buckets.set(name, b);
    return b;
  }

  bucket(name: string): StoredBucket {
    const b = this.buckets.get(name);
    if (!b) throw noSuchBucket(name);
    return b;
  }

  deleteBucket(name: string): void {
    const b = this.bucket(name);
    if (b.objects.size > 0) throw conflict('The bucket you tried to delete is not empty.');
    this.buckets.delete(name);
  }

  /** The live object, or a 404 (also when `generation` names a generation that is not live). */
  object(bucket: string, name: string, generation?: bigint): StoredObject {
    const o = this.bucket(bucket).objects.get(name);
    if (!o || (generation !== undefined && o.generation !== generation)) throw noSuchObject(bucket, name);
    return o;
  }

  peek(bucket: string, name: string): StoredObject | undefined {
    return this.bucket(bucket).objects.get(name);
  }

  /**
   * Create a new generation of `name` with `data`, after checking `pre` against the live object
   * (an insert's preconditions are about the object being replaced).
   */
  insert(bucket: string, name: string, data: Buffer, fields: WritableFields, pre: Preconditions, composite?: { componentCount: number }): StoredObject {
    validateObjectName(name);
    const b = this.bucket(bucket);
    checkPreconditions(b.objects.get(name), pre, 'write');
    this.objectRate?.take(bucket, name, 'write');
    const now = new Date();
    const o: StoredObject = {
      bucket,
      name,
      data,
      generation: this.nextGeneration(),
      metageneration: 1n,
      timeCreated: now,
      updated: now,
      crc32c: crc32cBase64(data),
      ...(composite ? { componentCount: composite.componentCount } : { md5Hash: md5Base64(data) }),
      ...pickWritable(fields),
      metadata: { ...(fields.metadata ?? {}) },
    };
    if (!o.contentType) o.contentType = 'application/octet-stream';
    b.objects.set(name, o);
    b.index.add(name);
    return o;
  }

  /** Metadata change in place: same generation, metageneration + 1. */
  updateMetadata(o: StoredObject, apply: (o: StoredObject) => void): StoredObject {
    this.objectRate?.take(o.bucket, o.name, 'metadata');
    apply(o);
    o.metageneration += 1n;
    o.updated = new Date();
    return o;
  }

  remove(bucket: string, name: string, pre: Preconditions, generation?: bigint): void {
    const o = this.object(bucket, name, generation);
    checkPreconditions(o, pre, 'write');
    this.objectRate?.take(bucket, name, 'write');
    const b = this.bucket(bucket);
    b.objects.delete(name);
    b.index.delete(name);
  }

  newUploadSession(bucket: string, name: string, fields: WritableFields, pre: Preconditions): UploadSession {
    validateObjectName(name);
    // Checked at initiation as well as at completion, so a doomed upload fails before its data is sent.
    checkPreconditions(this.bucket(bucket).objects.get(name), pre, 'write');
    const s: UploadSession = { id: randomUUID().replace(/-/g, ''), bucket, name, fields, preconditions: pre, chunks: [], committed: 0 };
    this.uploads.set(s.id, s);
    return s;
  }

  /** Drop everything (used by the admin reset endpoint between tests). */
  reset(): void {
    this.buckets.clear();
    this.uploads.clear();
  }
}

export function pickWritable(fields: WritableFields): WritableFields {
  const out: WritableFields = {};
  for (const k of WRITABLE_FIELD_NAMES) if (typeof fields[k] === 'string') out[k] = fields[k];
  return out;
}

/** GCS object names: 1..1024 bytes of UTF-8, no CR or LF, not "." or "..". */
export function validateObjectName(name: string): void {
  const len = Buffer.byteLength(name);
  if (len === 0 || len > 1024) throw badRequest('Object name must be between 1 and 1024 bytes.', 'required');
  if (/[\r\n]/.test(name)) throw badRequest('Object name must not contain carriage return or line feed.');
  if (name === '.' || name === '..') throw badRequest(`Object name '${name}' is not allowed.`);
}
