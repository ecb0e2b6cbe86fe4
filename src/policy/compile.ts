import { compileGlobs, formatSize, isBasenameOnly, type Limits, type Mode, type MountConfig, POLICY_DEFAULTS, type Privileges, type Quota, type RootConfig } from '../config/index.js';
import { isWithin } from '../core/index.js';

/**
 * A policy compiled once at mount: a trie of view path components answers "which root is this
 * path in?" in O(path depth), and each root carries its globs as one RegExp per rule, so a
 * decision costs a few Map lookups and at most two RegExp tests.
 */

export class CompiledRoot {
  readonly kind = 'root' as const;
  readonly writable: boolean;
  /** path === source: translation is the identity (no string work on the hot path) */
  readonly identity: boolean;
  /** usage is counted at mount and kept by the mutation path (writable, or has a quota) */
  readonly counted: boolean;
  /** lower-cased suffixes; undefined = any name */
  readonly suffixes: string[] | undefined;
  readonly hideRe: RegExp | null;
  readonly readonlyRe: RegExp | null;
  readonly hidePatterns: string[];
  readonly readonlyPatterns: string[];
  /** each pattern on its own, to name the one that applies in a refusal (slow path only) */
  private readonly hideEach: { glob: string; re: RegExp }[];
  private readonly readonlyEach: { glob: string; re: RegExp }[];
  /** some hide/readonly pattern depends on more than the name: renaming a directory must
   * check what it would change below it */
  readonly positional: boolean;

  constructor(
    readonly index: number,
    readonly config: RootConfig,
    topHide: string[],
    topReadonly: string[],
  ) {
    this.writable = config.mode === 'rw';
    this.identity = config.path === config.source;
    this.counted = this.writable || config.quota.bytes !== undefined || config.quota.files !== undefined;
    this.suffixes = config.suffixes?.map((s) => s.toLowerCase());
    const rules = (top: string[], own: string[]) => [
      ...top.map((glob) => ({ glob, base: '/' })),
      ...own.map((glob) => ({ glob, base: config.path })),
    ];
    // Hide globs ignore case: `Server.PEM`, `ID_RSA` or `.ENV` is as much a credential as its
    // lower-case name, and on a case-insensitive backend directory (ext4 casefold, vfat, exfat)
    // `.ENV` *is* `.env`. Hiding more than asked is the safe side; readonly globs keep case.
    this.hideRe = noCase(compileGlobs(rules(topHide, config.hide)));
    this.readonlyRe = compileGlobs(rules(topReadonly, config.readonly));
    const each = (top: string[], own: string[], hide: boolean) =>
      rules(top, own).map((r) => {
        const re = compileGlobs([r]);
        return { glob: r.glob, re: (hide ? noCase(re) : re) as RegExp };
      });
    this.hideEach = each(topHide, config.hide, true);
    this.readonlyEach = each(topReadonly, config.readonly, false);
    this.hidePatterns = [...topHide, ...config.hide];
    this.readonlyPatterns = [...topReadonly, ...config.readonly];
    this.positional = [...this.hidePatterns, ...this.readonlyPatterns].some((p) => !isBasenameOnly(p));
  }

  get path(): string {
    return this.config.path;
  }
  get source(): string {
    return this.config.source;
  }
  get mode(): Mode {
    return this.config.mode;
  }
  get quota(): Quota {
    return this.config.quota;
  }
  get maxFileBytes(): number | undefined {
    return this.config.maxFileBytes;
  }

  /** The backend path for a view path inside this root. */
  toBackend(path: string): string {
    if (this.identity) return path;
    if (path === this.config.path) return this.config.source;
    const rest = this.config.path === '/' ? path : path.slice(this.config.path.length);
    return this.config.source === '/' ? rest : this.config.source + rest;
  }

  /** The view path for a backend path inside this root's source. */
  toView(backendPath: string): string {
    if (this.identity) return backendPath;
    if (backendPath === this.config.source) return this.config.path;
    const rest = this.config.source === '/' ? backendPath : backendPath.slice(this.config.source.length);
    return this.config.path === '/' ? rest : this.config.path + rest;
  }

  /** The node does not exist in the view (a hide glob, or a directory kept for its hidden names). */
  isHidden(path: string): boolean {
    return (this.hideRe !== null && this.hideRe.test(path)) || path.includes(KEPT_MARK);
  }

  /** The pattern that hides `path`, for messages. */
  hidingPattern(path: string): string | undefined {
    return this.hideEach.find((p) => p.re.test(path))?.glob;
  }

  isReadonly(path: string): boolean {
    return this.readonlyRe !== null && this.readonlyRe.test(path);
  }

  readonlyPattern(path: string): string | undefined {
    return this.readonlyEach.find((p) => p.re.test(path))?.glob;
  }

  /** The name may be created or written here (suffix rule). */
  suffixAllowed(path: string): boolean {
    const s = this.suffixes;
    if (s === undefined) return true;
    const name = path.slice(path.lastIndexOf('/') + 1).toLowerCase();
    for (let i = 0; i < s.length; i++) if (name.endsWith(s[i] as string) && name.length > (s[i] as string).length) return true;
    return false;
  }
}

const noCase = (re: RegExp | null): RegExp | null => (re === null ? null : new RegExp(re.source, `${re.flags}i`));

/** "500 deletes, 1 GiB written" (empty: no limit). */
export function limitsLine(l: Limits): string {
  const parts: string[] = [];
  if (l.deletes !== undefined) parts.push(`${l.deletes} deletes`);
  if (l.renames !== undefined) parts.push(`${l.renames} renames`);
  if (l.filesWritten !== undefined) parts.push(`${l.filesWritten} files written`);
  if (l.bytesWritten !== undefined) parts.push(`${formatSize(l.bytesWritten)} written`);
  return parts.join(', ');
}

/** in a path, the start of a kept directory's name (POLICY_DEFAULTS.keptPrefix) */
const KEPT_MARK = `/${POLICY_DEFAULTS.keptPrefix}`;

/** Whether a name is a kept directory's (hidden in every view). */
export function isKeptName(name: string): boolean {
  return name.startsWith(POLICY_DEFAULTS.keptPrefix);
}

/*
 * Inode numbers of synthesized nodes: distinct (find and du detect directory cycles by inode),
 * stable for the mount, and far above what file systems hand out (the mount reports the
 * backend's own numbers for everything else).
 */
const SYNTH_INO_TOP = Number.MAX_SAFE_INTEGER;

/** A directory that only exists to lead to roots: read-only, lists only the way to them. */
export class SynthDir {
  readonly kind = 'synth' as const;
  readonly children = new Map<string, SynthDir | CompiledRoot>();
  constructor(
    readonly path: string,
    readonly ino: number,
  ) {}
  get names(): string[] {
    return [...this.children.keys()];
  }
}

/** A node of the read-only /.ledgerfs directory ('' is the directory itself). */
export class MetaNode {
  readonly kind = 'meta' as const;
  constructor(
    readonly name: '' | MetaFileName,
    readonly ino: number,
  ) {}
}

export const META_FILES = ['policy', 'usage', 'denials', 'session'] as const;
export type MetaFileName = (typeof META_FILES)[number];

const META_DIR = POLICY_DEFAULTS.metaDir;
const META_NODES = new Map<string, MetaNode>([
  [META_DIR, new MetaNode('', SYNTH_INO_TOP)],
  ...META_FILES.map((n, i) => [`${META_DIR}/${n}`, new MetaNode(n, SYNTH_INO_TOP - 1 - i)] as [string, MetaNode]),
]);

export type Location = CompiledRoot | SynthDir | MetaNode | null;

export class CompiledPolicy {
  readonly roots: CompiledRoot[];
  /** the view root: a synthesized directory, or the single root mounted at "/" */
  readonly top: SynthDir | CompiledRoot;
  /** "writable roots: /a, /b" (or "no root is writable"), for refusal reasons */
  readonly writableText: string;
  readonly metaDir = META_DIR;

  /** what programs may do that only the operator should (see policy/privileges.ts) */
  readonly privileges: Privileges;

  constructor(readonly config: MountConfig) {
    this.privileges = config.privileges ?? POLICY_DEFAULTS.privileges;
    this.roots = config.roots.map((r, i) => new CompiledRoot(i, r, config.hide, config.readonly));
    const single = this.roots.length === 1 && this.roots[0]?.path === '/' ? this.roots[0] : undefined;
    if (single) {
      this.top = single;
    } else {
      let ino = SYNTH_INO_TOP - 16;
      const top = new SynthDir('/', ino--);
      for (const root of this.roots) {
        let node = top;
        const parts = root.path.split('/').slice(1);
        parts.forEach((name, i) => {
          if (i === parts.length - 1) {
            node.children.set(name, root);
            return;
          }
          let next = node.children.get(name);
          if (next === undefined) {
            next = new SynthDir(node.path === '/' ? `/${name}` : `${node.path}/${name}`, ino--);
            node.children.set(name, next);
          }
          node = next as SynthDir; // roots are disjoint (checked at load), so never a root here
        });
      }
      this.top = top;
    }
    const writable = this.roots.filter((r) => r.writable).map((r) => r.path);
    this.writableText = writable.length ? `writable roots: ${writable.join(', ')}` : 'no root is writable';
  }

  /** Where a view path lands: its root, a synthesized parent of roots, /.ledgerfs, or nowhere. */
  locate(path: string): Location {
    // '/.ledgerfs...' : the second character is '.', which no other fast path needs to check
    if (path.charCodeAt(1) === 46 && path.startsWith(META_DIR) && (path.length === META_DIR.length || path.charCodeAt(META_DIR.length) === 47)) {
      return META_NODES.get(path) ?? null;
    }
    let node = this.top;
    if (node.kind === 'root' || path === '/') return node;
    let i = 1;
    for (;;) {
      const j = path.indexOf('/', i);
      const next: SynthDir | CompiledRoot | undefined = node.children.get(j < 0 ? path.slice(i) : path.slice(i, j));
      if (next === undefined) return null;
      if (next.kind === 'root' || j < 0) return next;
      node = next;
      i = j + 1;
    }
  }

  /** One line per limit of a root, for the policy description. */
  limitsText(root: CompiledRoot): string[] {
    const out: string[] = [];
    const q = root.quota;
    if (q.bytes !== undefined || q.files !== undefined) {
      out.push(`quota: ${q.bytes !== undefined ? formatSize(q.bytes) : 'unlimited bytes'}, ${q.files !== undefined ? `${q.files} files` : 'unlimited files'}`);
    }
    if (root.maxFileBytes !== undefined) out.push(`largest file: ${formatSize(root.maxFileBytes)}`);
    if (root.config.suffixes) out.push(`names of files created or written must end in: ${root.config.suffixes.join(' ')}`);
    const l = limitsLine(root.config.limits);
    if (l) out.push(`a session may change here at most: ${l}`);
    return out;
  }
}
