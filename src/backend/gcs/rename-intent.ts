import os from 'node:os';
import { randomUUID } from 'node:crypto';
import { DEFAULTS } from '../../config/index.js';
import { pidAlive } from '../../core/index.js';
import type { GcsRequests } from './client.js';
import { isNotFound, isPreconditionFailed } from './errors.js';
import type { ObjectInfo } from './metadata.js';

/*
 * A directory rename on GCS is many copies and then many deletes. Before the first copy, the
 * backend writes an *intent* object to the bucket, `<prefix>.ledgerfs/intents/<id>.json`
 * (DEFAULTS.gcs.renameIntentsPrefix, inside the workspace's reserved prefix), naming both
 * prefixes and every source object with the generation being moved. It is deleted when the
 * rename finished (or was undone after a failure). One left behind means its owner died
 * mid-way: the next open of the workspace (a mount, or a CLI command that opens the bucket)
 * finishes it, or undoes it when finishing is impossible, before anything else touches it.
 * In the bucket rather than in a local state directory so that any host can finish it.
 */

export interface IntentObject {
  name: string;
  generation: string;
  size: number;
  crc32c?: string;
  metadata: Record<string, string>;
}

export interface RenameIntent {
  v: 1;
  id: string;
  /** who is doing the rename: a live owner's intent is never touched by another opener */
  owner: { host: string; pid: number; instance: string };
  time: string;
  /** view paths, for messages and the report */
  from: string;
  to: string;
  /** directory prefixes (object names ending in '/') */
  fromKey: string;
  toKey: string;
  objects: IntentObject[];
  /** the destination's own placeholder that the copy of the source's placeholder replaces */
  replaced?: { generation: string; metadata: Record<string, string> };
}

export interface RenameRecovery {
  id: string;
  from: string;
  to: string;
  /** unreadable: an intent object this version cannot parse, left in place */
  outcome: 'completed' | 'undone' | 'unreadable';
  objects: number;
  /** source objects changed by someone else meanwhile, left where they are */
  leftInPlace: string[];
}

/** What the intent store needs from the backend. */
export interface IntentHost {
  readonly req: GcsRequests;
  readonly prefix: string;
  readonly instance: string;
  /** keep the source's parent directory once the rename emptied it */
  keepDirOf(key: string): Promise<void>;
  concurrency: number;
}

/** Backend instances of this process that are open (their intents are live). */
const liveInstances = new Set<string>();

export function registerInstance(): string {
  const id = randomUUID();
  liveInstances.add(id);
  return id;
}

export function unregisterInstance(id: string): void {
  liveInstances.delete(id);
}

/**
 * Whether an intent's owner is gone. On this host: its process is dead (or, in this process,
 * its backend was closed). Anywhere: its lease ran out (the owner renews it while it works,
 * see keepAlive; measured from the intent object's `updated` time), which also covers another
 * host, where we cannot look, and a pid reused by an unrelated process here.
 */
function abandoned(i: RenameIntent, updatedNs: bigint): boolean {
  if (Date.now() - Number(updatedNs / 1_000_000n) > DEFAULTS.gcs.renameIntentLeaseSec * 1000) return true;
  if (i.owner.host !== os.hostname()) return false;
  if (i.owner.pid === process.pid) return !liveInstances.has(i.owner.instance);
  return !pidAlive(i.owner.pid);
}

const isCopyOf = (dst: ObjectInfo, o: IntentObject) =>
  dst.generation > BigInt(o.generation) && dst.size === o.size && dst.crc32c === o.crc32c && sameMetadata(dst.metadata, o.metadata);

export function sameMetadata(a: Record<string, string>, b: Record<string, string>): boolean {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => a[k] === b[k]);
}

export async function inBatches<T>(items: T[], concurrency: number, fn: (item: T) => Promise<void>): Promise<void> {
  // After a failure no new item starts, and the ones in flight settle before the caller hears of
  // it: an undo that followed at once would miss copies still landing.
  let next = 0;
  let failed = false;
  let error: unknown;
  const worker = async () => {
    while (!failed && next < items.length) {
      try {
        await fn(items[next++] as T);
      } catch (err) {
        if (!failed) {
          failed = true;
          error = err;
        }
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, items.length)) }, worker));
  if (failed) throw error;
}

/** An intent as this version writes it, moving objects within this workspace's prefix; else undefined. */
function parseIntent(text: string, prefix: string): RenameIntent | undefined {
  try {
    const i = JSON.parse(text) as RenameIntent;
    const ok = i && i.v === 1 && typeof i.fromKey === 'string' && typeof i.toKey === 'string' && i.fromKey.endsWith('/') && i.toKey.endsWith('/') &&
      i.fromKey.startsWith(prefix) && i.toKey.startsWith(prefix) && Array.isArray(i.objects) && typeof i.owner?.host === 'string';
    return ok && i.objects.every((o) => typeof o.name === 'string' && o.name.startsWith(i.fromKey) && /^\d+$/.test(o.generation)) ? i : undefined;
  } catch {
    return undefined;
  }
}

export class RenameIntents {
  constructor(private readonly host: IntentHost) {}

  private get dirKey(): string {
    return this.host.prefix + DEFAULTS.gcs.renameIntentsPrefix;
  }

  private keyOf(id: string): string {
    return `${this.dirKey}${id}.json`;
  }

  /** Write the intent (durable in the bucket before the first copy). */
  async begin(from: string, to: string, fromKey: string, toKey: string, objects: ObjectInfo[], replaced: ObjectInfo | undefined): Promise<RenameIntent> {
    const intent: RenameIntent = {
      v: 1,
      id: `${Date.now()}-${randomUUID().slice(0, 8)}`,
      owner: { host: os.hostname(), pid: process.pid, instance: this.host.instance },
      time: new Date().toISOString(),
      from, to, fromKey, toKey,
      objects: objects.map((o) => ({ name: o.name, generation: o.generation.toString(), size: o.size, ...(o.crc32c ? { crc32c: o.crc32c } : {}), metadata: o.metadata })),
      ...(replaced ? { replaced: { generation: replaced.generation.toString(), metadata: replaced.metadata } } : {}),
    };
    try {
      await this.host.req.uploadBuffer(this.keyOf(intent.id), Buffer.from(JSON.stringify(intent)), { ifGenerationMatch: 0n, contentType: 'application/json', metadata: {} });
    } catch (err) {
      // the name is ours alone: a 412 is an earlier attempt of this upload that landed
      if (!isPreconditionFailed(err)) throw err;
    }
    return intent;
  }

  /**
   * While a long rename runs, renew the intent's lease (a metadata patch moves its `updated`
   * time) so another host does not take it for abandoned. `held()` says whether the lease is
   * still surely ours (renewed within 2/3 of it): the owner must not delete sources after that,
   * since another host may be undoing the rename meanwhile.
   */
  keepAlive(intent: RenameIntent): { stop: () => void; held: () => boolean } {
    const leaseMs = DEFAULTS.gcs.renameIntentLeaseSec * 1000;
    let renewedAt = Date.now();
    const timer = setInterval(() => {
      const at = Date.now();
      void (async () => {
        const cur = await this.host.req.head(this.keyOf(intent.id));
        if (cur) {
          await this.host.req.patchMetadata(cur.name, { renewed: new Date(at).toISOString() }, { ifGenerationMatch: cur.generation, ifMetagenerationMatch: cur.metageneration });
          renewedAt = at;
        }
      })().catch(() => undefined); // a missed renewal shortens the lease: held() tells
    }, leaseMs * DEFAULTS.gcs.renameIntentRenewFraction);
    timer.unref();
    return { stop: () => clearInterval(timer), held: () => Date.now() - renewedAt < leaseMs * DEFAULTS.gcs.renameIntentHeldFraction };
  }

  /** The rename is over (finished or undone): drop its intent. */
  async end(intent: RenameIntent): Promise<void> {
    try {
      const cur = await this.host.req.head(this.keyOf(intent.id));
      if (cur) await this.host.req.remove(cur.name, cur.generation);
    } catch (err) {
      if (!isNotFound(err) && !isPreconditionFailed(err)) throw err;
    }
  }

  /** Finish (or undo) every intent whose owner is gone. */
  async recoverAbandoned(): Promise<RenameRecovery[]> {
    const out: RenameRecovery[] = [];
    let pageToken: string | undefined;
    const found: ObjectInfo[] = [];
    do {
      const page = await this.host.req.list({ prefix: this.dirKey, ...(pageToken ? { pageToken } : {}) });
      found.push(...page.items.filter((o) => o.name.endsWith('.json')));
      pageToken = page.nextPageToken;
    } while (pageToken);
    for (const obj of found) {
      let text: string;
      try {
        text = obj.size > 0 ? (await this.host.req.readRange(obj.name, obj.generation, 0, obj.size - 1)).toString('utf8') : '';
      } catch (err) {
        if (isNotFound(err)) continue; // finished by its owner (or another host) meanwhile
        throw err;
      }
      const intent = parseIntent(text, this.host.prefix);
      if (!intent) {
        // not something this version wrote: left alone (and said), never a reason to refuse a mount
        out.push({ id: obj.name, from: '?', to: '?', outcome: 'unreadable', objects: 0, leftInPlace: [] });
        continue;
      }
      if (!abandoned(intent, obj.updatedNs)) continue;
      out.push(await this.recover(intent));
    }
    return out;
  }

  /**
   * Settle an intent: roll forward when every object is either copied already or still at the source with the
   * generation being moved; otherwise (or with `only: 'undo'`, after a failed copy) undo:
   * remove the copies made, put back what was moved.
   */
  async recover(intent: RenameIntent, only?: 'undo'): Promise<RenameRecovery> {
    const req = this.host.req;
    const plans = new Map<IntentObject, { dstKey: string; src: ObjectInfo | undefined; dst: ObjectInfo | undefined }>();
    await inBatches(intent.objects, this.host.concurrency, async (o) => {
      const dstKey = intent.toKey + o.name.slice(intent.fromKey.length);
      const [src, dst] = await Promise.all([req.head(o.name), req.head(dstKey)]);
      plans.set(o, { dstKey, src: src && src.generation === BigInt(o.generation) ? src : undefined, dst });
    });
    const replacedGen = intent.replaced ? BigInt(intent.replaced.generation) : undefined;
    // the precondition a missing copy needs, or null if it cannot be made
    const copyPre = (o: IntentObject): bigint | null => {
      const p = plans.get(o) as { dstKey: string; src: ObjectInfo | undefined; dst: ObjectInfo | undefined };
      if (p.dst && isCopyOf(p.dst, o)) return -1n; // done already
      if (!p.src) return null;
      if (!p.dst) return 0n;
      if (p.dstKey === intent.toKey && replacedGen !== undefined && p.dst.generation === replacedGen) return replacedGen;
      return null;
    };
    const forward = only !== 'undo' && intent.objects.every((o) => copyPre(o) !== null);
    const leftInPlace: string[] = [];
    if (forward) {
      await inBatches(intent.objects, this.host.concurrency, async (o) => {
        const pre = copyPre(o) as bigint;
        if (pre < 0n) return;
        const p = plans.get(o) as { dstKey: string };
        try {
          await req.copy(o.name, BigInt(o.generation), p.dstKey, { ifGenerationMatch: pre });
        } catch (err) {
          if (!isPreconditionFailed(err)) throw err;
          const cur = await req.head(p.dstKey);
          if (!cur || !isCopyOf(cur, o)) throw err; // someone wrote there this very moment: try again at the next open
        }
      });
      await inBatches(intent.objects, this.host.concurrency, async (o) => {
        try {
          await req.remove(o.name, BigInt(o.generation));
        } catch (err) {
          if (isPreconditionFailed(err)) leftInPlace.push(o.name);
          else if (!isNotFound(err)) throw err;
        }
      });
      await this.host.keepDirOf(intent.fromKey);
    } else {
      await inBatches(intent.objects, this.host.concurrency, async (o) => {
        const p = plans.get(o) as { dstKey: string; src: ObjectInfo | undefined; dst: ObjectInfo | undefined };
        if (!p.dst || !isCopyOf(p.dst, o)) return; // not copied (or overwritten by someone else since): nothing of ours there
        if (!p.src) {
          // moved already: copy it back before the copy goes
          const back = await req.head(o.name);
          if (back) {
            leftInPlace.push(o.name);
            return; // someone else put something at the source: keep both
          }
          await req.copy(p.dstKey, p.dst.generation, o.name, { ifGenerationMatch: 0n });
        }
        try {
          await req.remove(p.dstKey, p.dst.generation);
        } catch (err) {
          if (!isNotFound(err) && !isPreconditionFailed(err)) throw err;
        }
        if (p.dstKey === intent.toKey && intent.replaced) {
          // the destination had a placeholder of its own that the copy replaced: put it back
          try {
            await req.uploadBuffer(intent.toKey, Buffer.alloc(0), { ifGenerationMatch: 0n, metadata: intent.replaced.metadata });
          } catch (err) {
            if (!isPreconditionFailed(err)) throw err;
          }
        }
      });
      await this.host.keepDirOf(intent.toKey);
    }
    await this.end(intent);
    return { id: intent.id, from: intent.from, to: intent.to, outcome: forward ? 'completed' : 'undone', objects: intent.objects.length, leftInPlace };
  }
}
