import { DEFAULTS } from '../config/index.js';

/**
 * What the pool holds: something with a backing descriptor it can give up and get back later
 * (the local store's open files, src/backend/local.ts). The pool only reads and sets these
 * fields; the holder opens and closes.
 */
export interface Pooled {
  /** the descriptor, or -1 while it holds none */
  fd: number;
  /** used since the clock hand last passed (second chance) */
  ref: boolean;
  /** work off the JS thread uses the descriptor (copy_file_range): never closed under it */
  busy: number;
  /** cannot be reopened by path (unlinked or renamed over while open): never given up */
  pinned: boolean;
  /** index in the pool, -1 when not held */
  slot: number;
  /**
   * Give up the descriptor (the pool chose it). False when it must be kept after all (its node
   * has no name left to reopen it by): the pool pins it instead.
   */
  letGo(): boolean;
}

/** How big a pool may be: the capacity, and the part of it pinned descriptors may fill. */
export interface PoolSize {
  capacity: number;
  pinCap: number;
}

/**
 * The pool's size for a soft open-file limit (null: unknown): DEFAULTS.local.backingFdsMax at
 * most, always leaving DEFAULTS.local.fdHeadroom descriptors to the rest of the daemon (journal,
 * /dev/fuse, listings, sockets); pinned descriptors may fill DEFAULTS.local.pinnedShare of it,
 * so that files unlinked while open cannot leave everyone else's open files without a slot.
 */
export function poolSize(softLimit: number | null): PoolSize {
  const d = DEFAULTS.local;
  const room = softLimit === null || !Number.isFinite(softLimit) ? d.backingFdsMax : softLimit - d.fdHeadroom;
  const capacity = Math.max(Math.min(d.backingFdsMax, room), Math.min(d.backingFdsMin, Math.floor((softLimit ?? d.backingFdsMin * 2) / 2)), 2);
  return { capacity, pinCap: Math.max(1, Math.floor(capacity * d.pinnedShare)) };
}

/**
 * A bounded set of backing descriptors with CLOCK eviction (an approximate LRU whose hot path
 * is one boolean store: `ref = true` on use). When full, the least recently used descriptor that
 * is neither pinned nor busy is given up; its holder reopens it on its next use.
 */
export class FdPool {
  private readonly held: Pooled[] = [];
  private hand = 0;
  /** descriptors pinned (counted in `size`) */
  pinned = 0;

  constructor(readonly capacity: number, readonly pinCap: number) {}

  get size(): number {
    return this.held.length;
  }

  /** Room for one more descriptor, evicting if full; false when nothing can be given up. */
  makeRoom(): boolean {
    while (this.held.length >= this.capacity) if (!this.evictOne()) return false;
    return true;
  }

  add(e: Pooled): void {
    e.slot = this.held.length;
    e.ref = true;
    this.held.push(e);
  }

  /** The holder closed its descriptor itself (its file was closed). */
  remove(e: Pooled): void {
    const i = e.slot;
    if (i < 0) return;
    const last = this.held.pop() as Pooled;
    if (last !== e) {
      this.held[i] = last;
      last.slot = i;
    }
    e.slot = -1;
    if (e.pinned) {
      e.pinned = false;
      this.pinned--;
    }
  }

  /** Keep `e`'s descriptor until it is removed; false when pinned ones already fill their share. */
  pin(e: Pooled): boolean {
    if (e.pinned) return true;
    if (this.pinned >= this.pinCap) return false;
    e.pinned = true;
    this.pinned++;
    return true;
  }

  unpin(e: Pooled): void {
    if (!e.pinned) return;
    e.pinned = false;
    this.pinned--;
  }

  /** Give up one idle, unpinned descriptor; false when there is none. */
  evictOne(): boolean {
    // two sweeps at most: the first may only clear second chances
    for (let steps = 2 * this.held.length; steps > 0 && this.held.length > 0; steps--) {
      if (this.hand >= this.held.length) this.hand = 0;
      const e = this.held[this.hand] as Pooled;
      if (e.pinned || e.busy > 0) {
        this.hand++;
      } else if (e.ref) {
        e.ref = false;
        this.hand++;
      } else if (!e.letGo()) {
        // no name left to reopen it by (unlinked beside the mount): keep it, whatever the share
        e.pinned = true;
        this.pinned++;
        this.hand++;
      } else {
        this.remove(e); // the last one moves into this slot: the hand looks at it next
        return true;
      }
    }
    return false;
  }
}
