import { createRequire } from 'node:module';
import type * as Zod from 'zod';
import { compileGlob } from './glob.js';
import { PRESET_NAMES } from './defaults.js';
import { describeValue, parseDurationMs, parseSize } from './sizes.js';

/**
 * The mount/policy file as written (YAML or JSON). Every object is strict, so a typo is an
 * error naming the field and the allowed ones; load.ts turns zod issues into
 * `case.yaml: roots[0].mode: expected "ro" or "rw", got "rwx"` and applies preset and defaults.
 * Paths in the view are checked and normalized here; file system paths are resolved by load.ts
 * against the file's directory.
 */

/*
 * zod is about 850 kB of JavaScript in 95 modules: compiling it is a fifth of a CLI process's start
 * (and every process of ledgerfs would pay it). Only a mount file needs these schemas, so zod is
 * required, and the schemas built, on the first one.
 */
function build(z: typeof Zod) {
  /** A strict object whose unknown-key error lists the keys it does allow. */
  function strict<T extends Zod.ZodRawShape>(shape: T) {
    const allowed = Object.keys(shape).join(', ');
    return z.strictObject(shape, {
      error: (iss) => (iss.code === 'unrecognized_keys' ? `allowed: ${allowed}` : undefined),
    });
  }

  /** Sizes with units; `null` or "unlimited" lifts a limit a preset or `defaults` set. */
  const size = z.unknown().transform((v, ctx): number | 'unlimited' => {
    if (v === null || v === 'unlimited') return 'unlimited';
    const r = parseSize(v);
    if (typeof r === 'number') return r;
    ctx.addIssue({ code: 'custom', message: r.error });
    return z.NEVER;
  });

  const duration = z.unknown().transform((v, ctx): number => {
    const r = parseDurationMs(v);
    if (typeof r === 'number') return r;
    ctx.addIssue({ code: 'custom', message: r.error });
    return z.NEVER;
  });

  const count = z.unknown().transform((v, ctx): number | 'unlimited' => {
    if (v === null || v === 'unlimited') return 'unlimited';
    if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return v;
    ctx.addIssue({ code: 'custom', message: `expected a whole number >= 0 (or "unlimited"), got ${describeValue(v)}` });
    return z.NEVER;
  });

  /** An absolute path in the view or the backend, normalized ("/a//b/" -> "/a/b"); no "..". */
  const absPath = z.unknown().transform((v, ctx): string => {
    if (typeof v !== 'string' || !v.startsWith('/')) {
      ctx.addIssue({ code: 'custom', message: `expected an absolute path starting with "/", got ${describeValue(v)}` });
      return z.NEVER;
    }
    const parts = v.split('/').filter((p) => p !== '' && p !== '.');
    if (parts.includes('..')) {
      ctx.addIssue({ code: 'custom', message: `".." is not allowed in a path, got ${JSON.stringify(v)}` });
      return z.NEVER;
    }
    if (v.includes('\0')) {
      ctx.addIssue({ code: 'custom', message: 'a path cannot contain NUL' });
      return z.NEVER;
    }
    return '/' + parts.join('/');
  });

  const glob = z.unknown().transform((v, ctx): string => {
    if (typeof v !== 'string' || v.trim() === '') {
      ctx.addIssue({ code: 'custom', message: `expected a glob like "**/.env" or "intake/**", got ${describeValue(v)}` });
      return z.NEVER;
    }
    try {
      compileGlob(v);
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message });
      return z.NEVER;
    }
    return v;
  });

  const suffix = z.unknown().transform((v, ctx): string => {
    if (typeof v !== 'string' || !/^\.[^/\0]+$/.test(v)) {
      ctx.addIssue({ code: 'custom', message: `expected a file name suffix starting with "." like ".pdf", got ${describeValue(v)}` });
      return z.NEVER;
    }
    return v;
  });

  const nonEmpty = (what: string) =>
    z.unknown().transform((v, ctx): string => {
      if (typeof v === 'string' && v.trim() !== '') return v;
      ctx.addIssue({ code: 'custom', message: `expected ${what}, got ${describeValue(v)}` });
      return z.NEVER;
    });

  const mode = z.enum(['ro', 'rw']);

  const quota = strict({ bytes: size.optional(), files: count.optional() });

  /** The mass-change guard: how much one session may change (top level) or change in a root. */
  const limitsSchema = strict({
    /** unlink and rmdir */
    deletes: count.optional(),
    renames: count.optional(),
    /** distinct files created or whose content changed */
    filesWritten: count.optional(),
    /** bytes of write requests (and copy_file_range) */
    bytesWritten: size.optional(),
  });

  const rootSchema = strict({
    /** where the root appears in the view */
    path: absPath,
    /** the backend prefix it shows (default: the same path) */
    source: absPath.optional(),
    mode: mode.optional(),
    quota: quota.optional(),
    maxFileBytes: size.optional(),
    /** names of files created or written here must end in one of these (case-insensitive) */
    suffixes: z.array(suffix).optional(),
    /** globs relative to the root: matching nodes cannot be changed, created or removed */
    readonly: z.array(glob).optional(),
    /** globs relative to the root: matching nodes do not exist in the view */
    hide: z.array(glob).optional(),
    /** what one session may change in this root */
    limits: limitsSchema.optional(),
  });

  const defaultsSchema = strict({
    mode: mode.optional(),
    quota: quota.optional(),
    maxFileBytes: size.optional(),
    suffixes: z.array(suffix).optional(),
  });

  const localBackend = strict({
    type: z.literal('local'),
    /** a directory; relative to the mount file's directory */
    path: nonEmpty('a directory path'),
  });

  const seconds = z.unknown().transform((v, ctx): number => {
    if (typeof v === 'number' && Number.isFinite(v) && v >= 0) return v;
    ctx.addIssue({ code: 'custom', message: `expected seconds (a number >= 0), got ${describeValue(v)}` });
    return z.NEVER;
  });

  /** The cache layers around the GCS backend (defaults: DEFAULTS.gcsCache). */
  const gcsCache = strict({
    /** seconds attributes and listings are trusted (0: no metadata cache) */
    metadataTtl: seconds.optional(),
    /** the local content cache's byte limit (0 or null: none) */
    contentBytes: size.optional(),
    /** where the content cache lives; relative to the mount file's directory */
    contentDir: z.string().optional(),
  });

  const gcsBackend = strict({
    type: z.literal('gcs'),
    bucket: nonEmpty('a bucket name'),
    prefix: z.string().optional(),
    apiEndpoint: z.string().optional(),
    /** service account key file; relative to the mount file's directory */
    keyFile: z.string().optional(),
    /** directories exist by their common prefix too (default true) */
    implicitDirs: z.boolean().optional(),
    /** bucket (default): close(2) returns once the file is in the bucket; journal: once it is
     * durable in the state directory's upload spool, uploads in the background */
    durability: z.enum(['bucket', 'journal']).optional(),
    cache: gcsCache.optional(),
  });

  const mountFileSchema = strict({
    preset: z.enum(PRESET_NAMES as [string, ...string[]]).optional(),
    backend: z.discriminatedUnion('type', [localBackend, gcsBackend]),
    roots: z.array(rootSchema).min(1),
    defaults: defaultsSchema.optional(),
    /** globs relative to the view root ("/"), applied in every root; added to the preset's */
    hide: z.array(glob).optional(),
    /** the same, replacing the preset's list instead (as `hide` with `replaceHide: true`) */
    'hide!': z.array(glob).optional(),
    /** true: `hide` replaces the preset's list instead of adding to it */
    replaceHide: z.boolean().optional(),
    readonly: z.array(glob).optional(),
    /** what one session (one mount, one run) may change in all roots together; over the preset's */
    limits: limitsSchema.optional(),
    /** journal directory (consumed by the journal; relative to the mount file's directory) */
    state: nonEmpty('a directory path').optional(),
    /** session name for the journal */
    session: nonEmpty('a session name').optional(),
    /** retention the mount applies in the background (default: keep everything) */
    journal: strict({
      /** drop the oldest whole sessions while segments and before-images take more than this */
      maxBytes: size.optional(),
      /** drop history older than this */
      keep: duration.optional(),
    }).optional(),
    /** what programs may do that only the operator should (default: none of it) */
    privileges: strict({
      /** set S_ISUID (anything) or S_ISGID (on a file) by chmod, create or mknod */
      setid: z.boolean().optional(),
      /** give a node to another user or group than the caller's own */
      chown: z.boolean().optional(),
      /** make character and block device nodes (mknod; the local backend only) */
      devices: z.boolean().optional(),
    }).optional(),
  });

  return { limitsSchema, rootSchema, mountFileSchema };
}

let built: ReturnType<typeof build> | undefined;
function schemas(): ReturnType<typeof build> {
  return (built ??= build(createRequire(import.meta.url)('zod') as typeof Zod));
}

/** The mount file's schema (built on first use). */
export const mountFileSchema = (): ReturnType<typeof build>['mountFileSchema'] => schemas().mountFileSchema;

export type MountFile = Zod.output<ReturnType<typeof build>['mountFileSchema']>;
export type RootFile = Zod.output<ReturnType<typeof build>['rootSchema']>;
