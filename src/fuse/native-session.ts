import fs from 'node:fs';
import { createRequire } from 'node:module';
import { type Attr, type Caller, errnoOf, type FsStats, kernelErrno } from '../core/index.js';
import type { FsOps, MountedFs, MountOptions } from './binding.js';
import { mountAt, unmountPath } from './mounts.js';

/*
 * What the libfuse3 addon's binding (native-ll-binding.ts) needs around the op table: loading the
 * addon, the scratch layouts of attribute and statfs replies, renameat2's flags, and a session's
 * life from mount to the end of the kernel connection.
 */

const RENAME_NOREPLACE = 1;
const EINVAL = -errnoOf('EINVAL');
const EEXIST = -errnoOf('EEXIST');
const ENOENT = -errnoOf('ENOENT');

/** Load one of the libfuse3 addons and hand it its scratch area, or say why it cannot be used. */
export function loadAddon<A extends { setScratch(b: ArrayBuffer): void }>(file: string, label: string, scratchArea: ArrayBuffer): A | Error {
  try {
    const addon = createRequire(import.meta.url)(file) as A;
    addon.setScratch(scratchArea);
    return addon;
  } catch (err) {
    return new Error(`the ${label} libfuse3 binding is not built (${(err as Error).message.split('\n')[0]}); ` +
      'build it with: node scripts/build-native.mjs (needs apt-get install -y libfuse3-dev build-essential python3)');
  }
}

/**
 * mode uid gid size ino nlink blocks blksize rdev at f[o..o+8], the 3 times' seconds at
 * t[to..to+2] and their nanoseconds at n[no..no+2]: seconds and nanoseconds apart, since a
 * nanosecond count overflows 64 bits past 2262 (and before 1677).
 */
export function writeAttr(f: Float64Array, o: number, t: BigInt64Array, to: number, n: Int32Array, no: number, a: Attr): void {
  f[o] = a.mode; f[o + 1] = a.uid; f[o + 2] = a.gid; f[o + 3] = a.size; f[o + 4] = a.ino;
  f[o + 5] = a.nlink; f[o + 6] = a.blocks; f[o + 7] = 4096; f[o + 8] = a.rdev ?? 0;
  putTime(t, to, n, no, a.atimeNs);
  putTime(t, to + 1, n, no + 1, a.mtimeNs);
  putTime(t, to + 2, n, no + 2, a.ctimeNs);
}
function putTime(t: BigInt64Array, ti: number, n: Int32Array, ni: number, ns: bigint): void {
  let sec = ns / NS_PER_SEC; // toward zero
  let rem = ns - sec * NS_PER_SEC;
  if (rem < 0n) {
    rem += NS_PER_SEC;
    sec -= 1n;
  }
  t[ti] = sec;
  n[ni] = Number(rem);
}
/** the time `t[ti]` seconds + `n[ni]` nanoseconds, in nanoseconds */
export function readTime(t: BigInt64Array, ti: number, n: Int32Array, ni: number): bigint {
  return (t[ti] as bigint) * NS_PER_SEC + BigInt(n[ni] as number);
}
const NS_PER_SEC = 1_000_000_000n;
/** statfs as the addons read it: bsize frsize blocks bfree bavail files ffree favail namemax */
export function writeStatfs(f: Float64Array, s: FsStats): void {
  f[0] = s.bsize; f[1] = s.bsize; f[2] = s.blocks; f[3] = s.bfree; f[4] = s.bavail;
  f[5] = s.files; f[6] = s.ffree; f[7] = s.ffree; f[8] = s.namemax;
}
/** renameat2 as far as the core can: 0, or the -errno to answer (rejects with the core's errors). */
export async function renameWithFlags(ops: FsOps, c: Caller, from: string, to: string, flags: number): Promise<number> {
  // RENAME_EXCHANGE (and anything unknown) is not something the core can do atomically.
  if (flags & ~RENAME_NOREPLACE) return EINVAL;
  if (flags & RENAME_NOREPLACE) {
    // Checked here, not atomically in the backend: the kernel serialises renames into one
    // directory (lock on the target dir), so only a change made beside the mount can race.
    const exists = await ops.getattr(c, to).then(() => true, (e) => {
      if (kernelErrno(e) === ENOENT) return false;
      throw e;
    });
    if (exists) return EEXIST;
  }
  await ops.rename(c, from, to);
  return 0;
}

/**
 * Let the kernel read ahead up to `bytes` per request (1 MiB: libfuse 3's max_pages). The FUSE
 * INIT reply caps the mount's readahead at the kernel's proposal (128 KiB) and only the bdi's
 * sysfs knob raises it afterwards (root only); measured here, uncached dd bs=1M 0.57 -> 1.7 GB/s.
 * Runs once INIT is done, i.e. after a first request answered - asynchronously, since this
 * process is the one answering. Best effort: without it reads stay at 128 KiB.
 */
async function raiseReadahead(mountpoint: string, bytes: number): Promise<void> {
  if (process.getuid?.() !== 0) return;
  const st = await fs.promises.stat(mountpoint);
  const dev = st.dev;
  const major = (dev >> 8) & 0xfff;
  const minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
  await fs.promises.writeFile(`/sys/class/bdi/${major}:${minor}/read_ahead_kb`, String(Math.max(128, Math.floor(bytes / 1024))));
}

/** What the libfuse3 addon offers for a session's life. */
export interface SessionAddon<H> {
  mount(mountpoint: string, handler: H, options: Record<string, unknown>, xattrs: boolean): object;
  destroy(handle: object): void;
  unref(handle: object): void;
}

/**
 * Mount through `addon` and keep the session until it ends: the addon reports the end through
 * the handler (`onClosed`), unmounted by us or from outside; then it is destroyed.
 */
export function serveSession<H>(addon: SessionAddon<H>, mountpoint: string, makeHandler: (onClosed: () => void, session: () => object | undefined) => H,
  options: MountOptions, xattrs: boolean): MountedFs {
  let closedResolve!: () => void;
  const loopEnded = new Promise<void>((r) => (closedResolve = r));
  let handle: object | undefined;
  let destroyed = false;
  const onClosed = () => {
    // The session ended (unmounted by us or from outside): free it and let the event loop go.
    if (handle && !destroyed) {
      destroyed = true;
      addon.destroy(handle);
    }
    closedResolve();
  };
  handle = addon.mount(mountpoint, makeHandler(onClosed, () => (destroyed ? undefined : handle)), { ...options }, xattrs);
  void raiseReadahead(mountpoint, options.maxWriteBytes).catch(() => undefined);
  return {
    mountpoint,
    unmount: async () => {
      if (destroyed) return;
      // Unmounting ends the kernel connection; the session then sees ENODEV and stops.
      // A busy mount throws here and stays served: mount.ts retries, then detaches it lazily
      // and finishes without waiting for the session, which then must not hold the process.
      if (mountAt(mountpoint)) {
        try {
          await unmountPath(mountpoint);
        } catch (err) {
          if (handle && !destroyed) addon.unref(handle);
          throw err;
        }
      }
      await loopEnded;
    },
  };
}
