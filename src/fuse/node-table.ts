import { joinPath } from '../core/index.js';

/**
 * The kernel's node ids for the low-level binding (native-ll): each id names one directory
 * entry (parent id + name), so a path is computed by walking up and a directory rename moves its
 * whole subtree at once. The kernel counts its references per id (every entry reply, including
 * readdirplus entries, is one lookup) and gives them back with FORGET; an id is dropped when its
 * count reaches zero and no remembered child hangs below it. Ids are never reused (2^53 of
 * them), so the generation is always 0. Root is 1 and never forgotten.
 *
 * A hard link's second name gets its own id, as with libfuse's high-level API. An unlinked (or
 * renamed-over) entry is detached: the kernel may still use its id (an open file), but it has no
 * path any more; `openHandles` lets getattr fall back to an open handle then.
 */
export const ROOT_ID = 1;

export interface Node {
  readonly id: number;
  /** null: the root, or detached (unlinked / replaced while the kernel still knew it) */
  parent: Node | null;
  name: string;
  lookups: number;
  children: Map<string, Node> | undefined;
  /** open file handles of this node (newest last) */
  openHandles: number[] | undefined;
  /** its path as last computed, valid while the table's epoch is `pathEpoch` */
  path: string | null;
  pathEpoch: number;
}

export class NodeTable {
  private readonly byId = new Map<number, Node>();
  private readonly root: Node = { id: ROOT_ID, parent: null, name: '', lookups: 1, children: undefined, openHandles: undefined, path: '/', pathEpoch: 0 };
  private nextId = ROOT_ID + 1;
  /** bumped by every change of a path (rename, unlink): cached paths older than it are recomputed */
  private epoch = 0;

  constructor() {
    this.byId.set(ROOT_ID, this.root);
  }

  get size(): number {
    return this.byId.size;
  }

  get(id: number): Node | undefined {
    return this.byId.get(id);
  }

  /** The node's path, or null when it (or a directory above it) is detached or unknown. */
  path(id: number): string | null {
    const node = this.byId.get(id);
    return node ? this.pathOf(node) : null;
  }

  /** Every LOOKUP and GETATTR asks this: computed once per node until a rename or unlink. */
  private pathOf(node: Node): string | null {
    if (node === this.root) return '/';
    if (node.pathEpoch === this.epoch) return node.path;
    const dir = node.parent ? this.pathOf(node.parent) : null;
    node.path = dir === null ? null : joinPath(dir, node.name);
    node.pathEpoch = this.epoch;
    return node.path;
  }

  /** The path of `name` in directory `parentId`, or null when the directory has no path. */
  childPath(parentId: number, name: string): string | null {
    const dir = this.path(parentId);
    return dir === null ? null : joinPath(dir, name);
  }

  /**
   * The node of `name` in `parentId`, made if new, with `lookups` more kernel references
   * (0: only an id to offer, see release). undefined when the parent is gone.
   */
  ref(parentId: number, name: string, lookups = 1): Node | undefined {
    const parent = this.byId.get(parentId);
    if (!parent || (parent !== this.root && !parent.parent)) return undefined;
    let node = parent.children?.get(name);
    if (!node) {
      node = { id: this.nextId++, parent, name, lookups: 0, children: undefined, openHandles: undefined, path: null, pathEpoch: -1 };
      (parent.children ??= new Map()).set(name, node);
      this.byId.set(node.id, node);
    }
    node.lookups += lookups;
    return node;
  }

  /** The kernel dropped `n` references (FORGET). */
  forget(id: number, n: number): void {
    const node = this.byId.get(id);
    if (!node || node === this.root) return;
    node.lookups -= n;
    this.release(node);
  }

  /** Drop the node if nothing holds it any more (and then its parent, if that waited for it). */
  release(node: Node): void {
    while (node !== this.root && node.lookups <= 0 && !node.children?.size && !node.openHandles?.length) {
      this.byId.delete(node.id);
      const parent = node.parent;
      if (!parent) return;
      if (parent.children?.get(node.name) === node) parent.children.delete(node.name);
      node.parent = null;
      node = parent;
    }
  }

  /** `name` in `parentId` was unlinked or removed: its node (if known) loses its path. */
  removed(parentId: number, name: string): void {
    const node = this.byId.get(parentId)?.children?.get(name);
    if (node) this.detach(node);
  }

  /** A rename succeeded: the entry (and everything below it) now lives at the new name. */
  moved(parentId: number, name: string, newParentId: number, newName: string): void {
    this.epoch++;
    const from = this.byId.get(parentId);
    const node = from?.children?.get(name);
    const to = this.byId.get(newParentId);
    const replaced = to?.children?.get(newName);
    if (replaced && replaced !== node) this.detach(replaced);
    if (!node || !from) return;
    from.children?.delete(name);
    if (!to || (to !== this.root && !to.parent)) {
      // moved below a directory we no longer know: nothing can reach it by this id's path
      node.parent = null;
      this.release(node);
      this.release(from);
      return;
    }
    node.parent = to;
    node.name = newName;
    (to.children ??= new Map()).set(newName, node);
    this.release(from);
  }

  /** Remember that handle `fh` is open on `node` (getattr of a detached node uses it). */
  opened(node: Node, fh: number): void {
    (node.openHandles ??= []).push(fh);
  }

  closed(node: Node, fh: number): void {
    const list = node.openHandles;
    const at = list ? list.lastIndexOf(fh) : -1;
    if (list && at >= 0) list.splice(at, 1);
    this.release(node);
  }

  private detach(node: Node): void {
    const parent = node.parent;
    if (!parent) return;
    this.epoch++;
    if (parent.children?.get(node.name) === node) parent.children.delete(node.name);
    node.parent = null;
    this.release(node);
    this.release(parent);
  }
}
