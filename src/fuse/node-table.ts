import { joinPath } from '../core/index.js';

/**
 * The kernel's node ids for the low-level binding (native-ll): each id names one directory
 * entry (parent id + name), so a path is computed by walking up and a directory rename moves its
 * whole subtree at once. The kernel counts its references per id (every entry reply, including
 * readdirplus entries, is one lookup) and gives them back with FORGET; an id is dropped when its
 * count reaches zero and no remembered child hangs below it. Ids are never reused (2^53 of
 * them), so the generation is always 0. Root is 1 and never forgotten.
 *
 * With `byInode` (a store whose inode numbers name its nodes: the local backend), a hard link's
 * other names share the id of the node the table already has for that inode, as libfuse's
 * passthrough_ll does: the kernel then has one inode for all of them, so nlink, mode and ctime
 * show through every name at once. The node keeps one name as its path (`parent`/`name`) and
 * the others in `aliases`; unlinking its name promotes another. Without it (GCS: inode numbers
 * from paths) every name is its own id, as with libfuse's high-level API. An unlinked (or
 * renamed-over) entry that was a node's last name is detached: the kernel may still use its id
 * (an open file), but it has no path any more; `openHandles` lets getattr fall back to an open
 * handle then.
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
  /** the store's inode number of a non-directory (byInode tables) */
  ino?: number;
  /** its other names (hard links), when it has some */
  aliases?: Array<{ parent: Node; name: string }>;
  /** the size and mtime the kernel was last given for it (attribute and entry replies); the
   * open that finds others compares them to have the kernel forget its cached attributes */
  toldSize?: number | undefined;
  toldMtimeNs?: bigint | undefined;
  /** the mode it was last given: a write by a caller without CAP_FSETID to a node told no
   * setuid/setgid needs no stat to clear them (the kernel decided on its cached mode too) */
  toldMode?: number | undefined;
}

/** What an entry reply knows of the node behind a name: a hard link is a shared inode. */
export interface NodeIdentity {
  ino: number;
  nlink: number;
  dir: boolean;
}

export class NodeTable {
  private readonly byId = new Map<number, Node>();
  private readonly root: Node = { id: ROOT_ID, parent: null, name: '', lookups: 1, children: undefined, openHandles: undefined, path: '/', pathEpoch: 0 };
  private nextId = ROOT_ID + 1;
  /** bumped by every change of a path (rename, unlink): cached paths older than it are recomputed */
  private epoch = 0;
  /** attached non-directory nodes by store inode (byInode tables only) */
  private readonly byIno = new Map<number, Node>();

  constructor(private readonly byInode = false) {
    this.byId.set(ROOT_ID, this.root);
  }

  get size(): number {
    return this.byId.size;
  }

  /** The node the kernel knows at `path` (by its names from the root), if any. */
  find(path: string): Node | undefined {
    let n: Node | undefined = this.root;
    if (path === '/') return n;
    for (const part of path.slice(1).split('/')) {
      n = n.children?.get(part);
      if (!n) return undefined;
    }
    return n;
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
  ref(parentId: number, name: string, lookups = 1, who?: NodeIdentity): Node | undefined {
    const parent = this.byId.get(parentId);
    if (!parent || (parent !== this.root && !parent.parent)) return undefined;
    let node = parent.children?.get(name);
    const byIno = this.byInode && who !== undefined && !who.dir;
    if (node && byIno && node.ino !== undefined && node.ino !== who.ino) {
      // replaced beside the mount (another inode at this name now): the old node loses the name
      this.dropName(node, parent, name);
      node = undefined;
    }
    if (node && byIno && node.ino === undefined) {
      node.ino = who.ino;
      if (!this.byIno.has(who.ino)) this.byIno.set(who.ino, node);
    }
    if (!node && byIno && who.nlink > 1) {
      // another name of an inode the kernel knows: the same node (a hard link)
      const same = this.byIno.get(who.ino);
      if (same && same.parent) {
        (parent.children ??= new Map()).set(name, same);
        (same.aliases ??= []).push({ parent, name });
        node = same;
      }
    }
    if (!node) {
      node = { id: this.nextId++, parent, name, lookups: 0, children: undefined, openHandles: undefined, path: null, pathEpoch: -1 };
      (parent.children ??= new Map()).set(name, node);
      this.byId.set(node.id, node);
      if (byIno) {
        node.ino = who.ino;
        this.byIno.set(who.ino, node);
      }
    }
    node.lookups += lookups;
    return node;
  }

  /** The attached node the table serves inode `ino` by (hard links), if any. */
  nodeOfInode(ino: number): Node | undefined {
    const n = this.byIno.get(ino);
    return n?.parent ? n : undefined;
  }

  /**
   * The store no longer has inode `ino` under that node's name (the number went to another
   * file): new names of `ino` get a node of their own.
   */
  forgetInode(ino: number): void {
    this.byIno.delete(ino);
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
      if (node.ino !== undefined && this.byIno.get(node.ino) === node) this.byIno.delete(node.ino);
      const aliases = node.aliases;
      node.aliases = undefined;
      for (const a of aliases ?? []) {
        if (a.parent.children?.get(a.name) === node) a.parent.children.delete(a.name);
        this.release(a.parent);
      }
      const parent = node.parent;
      if (!parent) return;
      if (parent.children?.get(node.name) === node) parent.children.delete(node.name);
      node.parent = null;
      node = parent;
    }
  }

  /** `name` in `parentId` was unlinked or removed: its node (if known) loses its path. */
  removed(parentId: number, name: string): void {
    const parent = this.byId.get(parentId);
    const node = parent?.children?.get(name);
    if (node && parent) this.dropName(node, parent, name);
  }

  /** A rename succeeded: the entry (and everything below it) now lives at the new name. */
  moved(parentId: number, name: string, newParentId: number, newName: string): void {
    this.epoch++;
    const from = this.byId.get(parentId);
    const node = from?.children?.get(name);
    const to = this.byId.get(newParentId);
    const replaced = to?.children?.get(newName);
    if (replaced && to && replaced !== node) this.dropName(replaced, to, newName);
    if (!node || !from) return;
    if (replaced === node && to) {
      // two names of one inode: rename(2) does nothing
      return;
    }
    const alias = node.aliases?.find((a) => a.parent === from && a.name === name);
    if (alias) {
      // one of its other names moved: the node's path stays
      from.children?.delete(name);
      if (!to || (to !== this.root && !to.parent)) {
        node.aliases = node.aliases?.filter((a) => a !== alias);
      } else {
        alias.parent = to;
        alias.name = newName;
        (to.children ??= new Map()).set(newName, node);
      }
      this.release(from);
      return;
    }
    from.children?.delete(name);
    if (!to || (to !== this.root && !to.parent)) {
      // moved below a directory we no longer know: nothing can reach it by this id's path
      const next = node.aliases?.shift();
      if (next) {
        node.parent = next.parent;
        node.name = next.name;
        this.release(from);
        return;
      }
      if (node.ino !== undefined && this.byIno.get(node.ino) === node) this.byIno.delete(node.ino);
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

  /** `name` in `parent` no longer names `node`: another of its names becomes its path, else it is detached */
  private dropName(node: Node, parent: Node, name: string): void {
    this.epoch++;
    if (parent.children?.get(name) === node) parent.children.delete(name);
    if (node.parent === parent && node.name === name) {
      const next = node.aliases?.shift();
      if (next) {
        node.parent = next.parent;
        node.name = next.name;
      } else {
        node.parent = null;
        if (node.ino !== undefined && this.byIno.get(node.ino) === node) this.byIno.delete(node.ino);
      }
    } else if (node.aliases) {
      node.aliases = node.aliases.filter((a) => !(a.parent === parent && a.name === name));
    }
    this.release(node);
    this.release(parent);
  }
}
