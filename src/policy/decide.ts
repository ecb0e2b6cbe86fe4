import { parentOf, VfsError } from '../core/index.js';
import type { CompiledPolicy, CompiledRoot } from './compile.js';

/**
 * Pure decisions over a compiled policy: a root to go on with, or the refusal as a VfsError
 * (errno + a sentence for the program's person, the log and /.ledgerfs/denials). Nothing is
 * thrown here and nothing is recorded: the callers (view, stage) do that.
 *
 * Two levels:
 *  - where*: what the view's shape alone says (outside every root, synthesized parents,
 *    /.ledgerfs, hidden names, a root itself). The view enforces these for everyone, operator
 *    included: they are what makes a path translatable at all.
 *  - rules: what a root's rules say (read-only mode, readonly globs, suffixes). The policy stage
 *    enforces these for programs; an operator action (rollback) bypasses them.
 */

const notFound = (path: string) => new VfsError('ENOENT', `${path} does not exist in this view`);

function synthReason(p: CompiledPolicy, path: string, verb: string, dir: string): string {
  return `${verb} ${path} refused: ${dir} is a read-only directory that only leads to the roots; ${p.writableText}`;
}

function metaReason(p: CompiledPolicy, path: string, verb: string): string {
  return `${verb} ${path} refused: ${p.metaDir} is ledgerfs's read-only explanation of the policy; ${p.writableText}`;
}

/** An existing node at `path` is changed; `removes` when its name goes away (unlink, rmdir,
 * rename source), which a root itself cannot do. */
export function whereChange(p: CompiledPolicy, path: string, verb: string, removes: boolean): CompiledRoot | VfsError {
  const loc = p.locate(path);
  if (loc === null) return notFound(path);
  if (loc.kind === 'synth') return new VfsError('EROFS', synthReason(p, path, verb, path));
  if (loc.kind === 'meta') return new VfsError('EROFS', metaReason(p, path, verb));
  if (removes && path === loc.path) {
    return new VfsError('EROFS', `${verb} ${path} refused: ${path} is a root of the view; it cannot be removed or renamed`);
  }
  if (loc.isHidden(path)) return notFound(path);
  return loc;
}

/** A new name is made at `path`. `replaces`: rename onto it (a root or synthesized directory
 * cannot be replaced: EROFS); otherwise an existing synthesized name is EEXIST, as `mkdir -p`
 * expects. */
export function whereCreate(p: CompiledPolicy, path: string, verb: string, replaces: boolean): CompiledRoot | VfsError {
  const loc = p.locate(path);
  if (loc === null) {
    const parent = p.locate(parentOf(path));
    if (parent?.kind === 'synth') return new VfsError('EROFS', synthReason(p, path, verb, parent.path));
    if (parent?.kind === 'meta') return new VfsError('EROFS', metaReason(p, path, verb));
    return notFound(parentOf(path));
  }
  if (loc.kind !== 'root' || path === loc.path) {
    if (!replaces) return new VfsError('EEXIST', `${path} exists`);
    if (loc.kind === 'meta') return new VfsError('EROFS', metaReason(p, path, verb));
    return new VfsError('EROFS', `${verb} ${path} refused: ${path} is ${loc.kind === 'root' ? 'a root of the view' : 'a read-only directory that only leads to the roots'}; it cannot be replaced`);
  }
  if (loc.isHidden(path)) {
    if (loc.isHidden(parentOf(path))) return notFound(parentOf(path));
    const pattern = loc.hidingPattern(path);
    return new VfsError('EACCES', `${verb} ${path} refused: ${pattern ? `names matching ${pattern}` : 'this name'} ${pattern ? 'are' : 'is'} hidden by the policy`);
  }
  return loc;
}

/**
 * The root's rules for changing or creating `path`: EROFS in a read-only root, EACCES for a
 * readonly glob, and EACCES for a file name without an allowed suffix when `content` (the
 * node is, or becomes, a file whose content is written).
 */
export function rules(p: CompiledPolicy, root: CompiledRoot, path: string, verb: string, content: boolean): VfsError | null {
  if (!root.writable) return new VfsError('EROFS', `${verb} ${path} refused: ${root.path} is read-only; ${p.writableText}`);
  if (root.readonlyRe !== null && root.isReadonly(path)) {
    return new VfsError('EACCES', `${verb} ${path} refused: it matches the read-only pattern ${root.readonlyPattern(path) ?? ''} in ${root.path}`);
  }
  if (content && root.suffixes !== undefined && !root.suffixAllowed(path)) {
    return new VfsError('EACCES', `${verb} ${path} refused: in ${root.path} only files ending in ${root.config.suffixes?.join(' ')} may be created or written`);
  }
  return null;
}

/** Rename and link stay inside one root; across roots `mv` and `cp -l` fall back to copying. */
export function sameRoot(verb: string, from: string, a: CompiledRoot, to: string, b: CompiledRoot): VfsError | null {
  if (a === b) return null;
  return new VfsError('EXDEV', `${verb} ${from} to ${to}: they are in different roots (${a.path}, ${b.path}); copy and delete instead`);
}
