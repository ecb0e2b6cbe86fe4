import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type * as z from 'zod';
import { LIMIT_NAMES, type Limits, POLICY_DEFAULTS, POLICY_PRESETS, type PolicyPreset, type PresetName, type Privileges } from './defaults.js';
import { mountFileSchema, type MountFile, type RootFile } from './schema.js';
import { describeValue } from './sizes.js';

/**
 * The YAML parser, loaded when a mount file is first read: most CLI commands read none, and
 * every CLI process would pay for it at start (the tests start hundreds).
 */
let yamlModule: typeof import('yaml') | undefined;
function yaml(): typeof import('yaml') {
  return (yamlModule ??= createRequire(import.meta.url)('yaml') as typeof import('yaml'));
}

/** A mount file problem, already phrased for a person: `case.yaml: roots[0].mode: ...`. */
export class ConfigError extends Error {}

export type Mode = 'ro' | 'rw';

export interface Quota {
  bytes?: number;
  files?: number;
}

/** One root with preset and defaults applied: everything the compiler needs, nothing optional
 * that has a default. */
export interface RootConfig {
  path: string;
  source: string;
  mode: Mode;
  quota: Quota;
  maxFileBytes?: number;
  suffixes?: string[];
  readonly: string[];
  hide: string[];
  /** what one session may change in this root (its own `limits:` only; no preset gives one) */
  limits: Limits;
}

export interface LocalBackendConfig {
  type: 'local';
  /** absolute */
  path: string;
}

export interface GcsBackendConfig {
  type: 'gcs';
  bucket: string;
  prefix?: string;
  apiEndpoint?: string;
  /** absolute when given */
  keyFile?: string;
  implicitDirs?: boolean;
  /** bucket (default): close(2) returns once in the bucket; journal: once durable in the state directory */
  durability?: 'bucket' | 'journal';
  cache?: {
    metadataTtlSec?: number;
    /** 0: no content cache */
    contentBytes?: number;
    /** absolute when given */
    contentDir?: string;
  };
}

export type BackendConfig = LocalBackendConfig | GcsBackendConfig;

/** How much journal a mount keeps: history no older than keepMs, segments and before-images within maxBytes. */
export interface JournalRetention {
  maxBytes?: number;
  keepMs?: number;
}

/** The effective mount configuration. */
export interface MountConfig {
  /** the file it came from (absolute), for messages */
  file?: string;
  preset?: PresetName;
  backend: BackendConfig;
  roots: RootConfig[];
  /** globs relative to the view root, applied in every root */
  hide: string[];
  readonly: string[];
  /** journal directory (absolute), passed through for the journal */
  state?: string;
  session?: string;
  /** the mount file's `journal:` retention, applied by the mount in the background (absent: keep everything) */
  journal?: JournalRetention;
  /** absent: POLICY_DEFAULTS.privileges */
  privileges?: Privileges;
  /** what one session may change in all roots together (the file's over the preset's) */
  limits: Limits;
  /**
   * false: /.ledgerfs answers by name but is not listed in "/" (`run --source`: the program's
   * own tree, where `git add -A` or `tar c .` must not pick it up). Default: listed.
   */
  listMeta?: boolean;
}

// ---- error formatting ----------------------------------------------------------------------

function fieldPath(segs: readonly PropertyKey[]): string {
  let out = '';
  for (const s of segs) out += typeof s === 'number' ? `[${s}]` : out === '' ? String(s) : `.${String(s)}`;
  return out;
}

function valueAt(root: unknown, segs: readonly PropertyKey[]): unknown {
  let v = root;
  for (const s of segs) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[s as string];
  }
  return v;
}

function orList(values: readonly unknown[]): string {
  const q = values.map((v) => JSON.stringify(v));
  return q.length <= 1 ? (q[0] ?? '') : `${q.slice(0, -1).join(', ')} or ${q[q.length - 1]}`;
}

const TYPE_NAMES: Record<string, string> = {
  string: 'a string', number: 'a number', boolean: 'true or false', object: 'a mapping', array: 'a list',
};

/** Closest allowed key, for "did you mean" (edit distance <= 2). */
function closest(key: string, allowed: string[]): string | undefined {
  const dist = (a: string, b: string): number => {
    const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
    for (let j = 1; j <= b.length; j++) (d[0] as number[])[j] = j;
    for (let i = 1; i <= a.length; i++) {
      for (let j = 1; j <= b.length; j++) {
        const row = d[i] as number[];
        const prev = d[i - 1] as number[];
        row[j] = Math.min((prev[j] as number) + 1, (row[j - 1] as number) + 1, (prev[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1));
      }
    }
    return (d[a.length] as number[])[b.length] as number;
  };
  let best: string | undefined;
  let bestD = 3;
  for (const k of allowed) {
    const dd = dist(key.toLowerCase(), k.toLowerCase());
    if (dd < bestD) {
      best = k;
      bestD = dd;
    }
  }
  return best;
}

function issueLines(iss: z.core.$ZodIssue, input: unknown): string[] {
  const at = fieldPath(iss.path);
  const got = valueAt(input, iss.path);
  const prefix = (p: string) => (p === '' ? '' : `${p}: `);
  switch (iss.code) {
    case 'unrecognized_keys': {
      const allowed = iss.message.replace(/^allowed: /, '').split(', ');
      return iss.keys.map((k) => {
        const hint = closest(k, allowed);
        return `${prefix(fieldPath([...iss.path, k]))}unknown field${hint ? ` (did you mean "${hint}"?)` : ''}; allowed here: ${allowed.join(', ')}`;
      });
    }
    case 'invalid_value':
      return [`${prefix(at)}expected ${orList(iss.values)}, got ${describeValue(got)}`];
    case 'invalid_union': {
      const u = iss as z.core.$ZodIssueInvalidUnion & { options?: unknown[] };
      if (u.options) return [`${prefix(at)}expected ${orList(u.options)}, got ${describeValue(got)}`];
      return [`${prefix(at)}${iss.message}`];
    }
    case 'invalid_type':
      if (got === undefined) return [`${prefix(at)}missing (expected ${TYPE_NAMES[iss.expected] ?? iss.expected})`];
      return [`${prefix(at)}expected ${TYPE_NAMES[iss.expected] ?? iss.expected}, got ${describeValue(got)}`];
    case 'too_small':
      if (iss.origin === 'array') return [`${prefix(at)}expected at least ${iss.minimum} item${iss.minimum === 1 ? '' : 's'}`];
      return [`${prefix(at)}${iss.message}`];
    default:
      return [`${prefix(at)}${iss.message}`];
  }
}

// ---- cross-field checks --------------------------------------------------------------------

/** `path` is `dir` or below it (normalized absolute paths; config sits below core's paths.ts). */
function isWithin(path: string, dir: string): boolean {
  return dir === '/' || path === dir || path.startsWith(dir + '/');
}

function checkRoots(roots: RootConfig[], label: string): void {
  const problems: string[] = [];
  const meta = POLICY_DEFAULTS.metaDir;
  roots.forEach((r, i) => {
    if (isWithin(r.path, meta)) {
      problems.push(`roots[${i}].path: ${r.path} is inside ${meta}, which ledgerfs reserves for its own read-only files`);
    }
    for (let j = 0; j < i; j++) {
      const o = roots[j] as RootConfig;
      if (isWithin(r.path, o.path) || isWithin(o.path, r.path)) {
        problems.push(
          r.path === o.path
            ? `roots[${i}].path: ${r.path} is already roots[${j}]`
            : `roots[${i}].path: ${r.path} and roots[${j}].path ${o.path} are nested; roots must be disjoint (give the inner part its own root next to the outer one)`,
        );
      } else if (isWithin(r.source, o.source) || isWithin(o.source, r.source)) {
        problems.push(
          `roots[${i}].source: backend path ${r.source} overlaps roots[${j}] (${o.source}); two roots showing the same data would let one undo the other's limits`,
        );
      }
    }
  });
  if (problems.length) throw new ConfigError(problems.map((p) => `${label}: ${p}`).join('\n'));
}

// ---- presets and defaults ------------------------------------------------------------------

const lift = <T>(v: T | 'unlimited' | undefined, fallback: T | undefined): T | undefined =>
  v === 'unlimited' ? undefined : v === undefined ? fallback : v;

function effectiveRoot(r: RootFile, file: MountFile, preset: PolicyPreset | undefined): RootConfig {
  const pd = preset?.defaults;
  const fd = file.defaults;
  // defaults: the file's `defaults` over the preset's, field by field (quota per limit)
  const dMode = fd?.mode ?? pd?.mode ?? POLICY_DEFAULTS.rootMode;
  const dBytes = lift(fd?.quota?.bytes, pd?.quota?.bytes);
  const dFiles = lift(fd?.quota?.files, pd?.quota?.files);
  const dMax = lift(fd?.maxFileBytes, pd?.maxFileBytes);
  const dSuffixes = fd?.suffixes ?? (pd?.suffixes ? [...pd.suffixes] : undefined);
  const mode = r.mode ?? dMode;
  // Limits only bind writes: a read-only root takes none from the defaults (it would show a
  // quota in df and /.ledgerfs/usage that nothing can use), only those it states itself.
  const inherit = <T>(v: T | undefined): T | undefined => (mode === 'rw' ? v : undefined);
  const quota: Quota = {};
  const bytes = lift(r.quota?.bytes, inherit(dBytes));
  const files = lift(r.quota?.files, inherit(dFiles));
  if (bytes !== undefined) quota.bytes = bytes;
  if (files !== undefined) quota.files = files;
  const out: RootConfig = {
    path: r.path,
    source: r.source ?? r.path,
    mode,
    quota,
    readonly: r.readonly ?? [],
    hide: r.hide ?? [],
    limits: effectiveLimits(r.limits, undefined),
  };
  const max = lift(r.maxFileBytes, inherit(dMax));
  if (max !== undefined) out.maxFileBytes = max;
  const suffixes = r.suffixes ?? inherit(dSuffixes);
  if (suffixes !== undefined) out.suffixes = suffixes;
  return out;
}

type LimitsFile = NonNullable<MountFile['limits']>;

/** Field by field: the file's value, else the preset's; `unlimited` (or null) lifts the preset's. */
function effectiveLimits(own: LimitsFile | undefined, preset: Limits | undefined): Limits {
  const out: Limits = {};
  for (const k of LIMIT_NAMES) {
    const v = lift(own?.[k], preset?.[k]);
    if (v !== undefined) out[k] = v;
  }
  return out;
}

/**
 * The file's hide list joins the preset's: a file that hides one more name must not, by saying
 * so, show the credentials the preset hid. Replacing takes words: `hide!:` or `replaceHide: true`.
 */
function effectiveHide(file: MountFile, preset: PolicyPreset | undefined, label: string): string[] {
  if (file.hide !== undefined && file['hide!'] !== undefined) {
    throw new ConfigError(`${label}: hide and hide! cannot both be given: hide adds to the preset's list, hide! replaces it`);
  }
  const own = file['hide!'] ?? file.hide ?? [];
  if (file['hide!'] !== undefined || file.replaceHide === true) return [...own];
  return [...new Set([...(preset?.hide ?? []), ...own])];
}

/**
 * Validate a mount file's text and return the effective configuration. `label` names the file
 * in messages; relative file system paths resolve against `baseDir`.
 */
export function parseMountFile(text: string, label: string, baseDir: string): MountConfig {
  let data: unknown;
  try {
    data = yaml().parse(text, { prettyErrors: true });
  } catch (err) {
    const e = err as Error & { linePos?: { line: number; col: number }[] };
    const pos = e.linePos?.[0];
    throw new ConfigError(`${label}${pos ? `:${pos.line}:${pos.col}` : ''}: not valid YAML or JSON: ${e.message.split('\n')[0]}`);
  }
  if (data === null || data === undefined) throw new ConfigError(`${label}: the file is empty; it needs at least backend and roots`);
  const parsed = mountFileSchema().safeParse(data);
  if (!parsed.success) {
    const lines = parsed.error.issues.flatMap((iss) => issueLines(iss, data));
    throw new ConfigError(lines.map((l) => `${label}: ${l}`).join('\n'));
  }
  const file = parsed.data;
  const preset = file.preset ? (POLICY_PRESETS[file.preset as PresetName] as PolicyPreset) : undefined;
  const roots = file.roots.map((r) => effectiveRoot(r, file, preset));
  checkRoots(roots, label);

  const backend: BackendConfig =
    file.backend.type === 'local'
      ? { type: 'local', path: path.resolve(baseDir, file.backend.path) }
      : {
          type: 'gcs',
          bucket: file.backend.bucket,
          ...(file.backend.prefix !== undefined ? { prefix: file.backend.prefix } : {}),
          ...(file.backend.apiEndpoint !== undefined ? { apiEndpoint: file.backend.apiEndpoint } : {}),
          ...(file.backend.keyFile !== undefined ? { keyFile: path.resolve(baseDir, file.backend.keyFile) } : {}),
          ...(file.backend.implicitDirs !== undefined ? { implicitDirs: file.backend.implicitDirs } : {}),
          ...(file.backend.durability !== undefined ? { durability: file.backend.durability } : {}),
          ...(file.backend.cache !== undefined ? { cache: gcsCacheConfig(file.backend.cache, baseDir) } : {}),
        };
  const config: MountConfig = {
    backend,
    roots,
    hide: effectiveHide(file, preset, label),
    readonly: file.readonly ?? (preset ? [...preset.readonly] : []),
    limits: effectiveLimits(file.limits, preset?.limits),
  };
  if (file.preset) config.preset = file.preset as PresetName;
  if (file.state !== undefined) config.state = path.resolve(baseDir, file.state);
  if (file.session !== undefined) config.session = file.session;
  if (file.journal !== undefined) {
    const r: JournalRetention = {};
    if (typeof file.journal.maxBytes === 'number') r.maxBytes = file.journal.maxBytes;
    if (file.journal.keep !== undefined) r.keepMs = file.journal.keep;
    if (r.maxBytes !== undefined || r.keepMs !== undefined) config.journal = r;
  }
  if (file.privileges !== undefined) config.privileges = { ...POLICY_DEFAULTS.privileges, ...file.privileges };
  return config;
}

/** Read and validate a mount file (YAML or JSON). Errors are ConfigErrors naming the file. */
export function loadMountFile(file: string): MountConfig {
  const abs = path.resolve(file);
  let text: string;
  try {
    text = fs.readFileSync(abs, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new ConfigError(`${file}: cannot read the mount file${code === 'ENOENT' ? ' (it does not exist)' : `: ${(err as Error).message}`}`);
  }
  const config = parseMountFile(text, file, path.dirname(abs));
  config.file = abs;
  return config;
}

/** The config for `--source DIR`: the whole directory as one read-write root, no limits. */
export function sourceConfig(dir: string): MountConfig {
  return {
    backend: { type: 'local', path: path.resolve(dir) },
    roots: [{ path: '/', source: '/', mode: 'rw', quota: {}, readonly: [], hide: [], limits: {} }],
    hide: [],
    readonly: [],
    limits: {},
  };
}

function gcsCacheConfig(c: { metadataTtl?: number | undefined; contentBytes?: number | 'unlimited' | undefined; contentDir?: string | undefined }, baseDir: string): NonNullable<GcsBackendConfig['cache']> {
  return {
    ...(c.metadataTtl !== undefined ? { metadataTtlSec: c.metadataTtl } : {}),
    // "unlimited" makes no sense for a disk cache; null/unlimited switch it off like 0
    ...(c.contentBytes !== undefined ? { contentBytes: c.contentBytes === 'unlimited' ? 0 : c.contentBytes } : {}),
    ...(c.contentDir !== undefined ? { contentDir: path.resolve(baseDir, c.contentDir) } : {}),
  };
}
