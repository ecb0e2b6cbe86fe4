import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { DEFAULTS } from '../config/index.js';
import type { Logger } from '../core/index.js';
import { stateLayout } from './layout.js';
import { JournalLock } from './lock.js';
import { JournalDamagedError } from './reader.js';
import { RollbackError } from './rollback.js';
import type { JournalService, RollbackRequest } from './service.js';
import { TagError, type TagRequest } from './tags.js';

/*
 * The live daemon's control socket: `ledgerfs rollback`, `gc` and `tag` on a mounted workspace
 * ask the daemon, so the undo goes through the mount's own Vfs (open files, quota usage and the
 * one journal writer stay consistent). One JSON request line per connection; the answer is JSON
 * lines: progress events, then one result or error.
 */

export interface DaemonInfo {
  pid: number;
  socket: string;
  mountpoint: string;
  session: string;
  started: string;
}

export type ControlRequest =
  | { cmd: 'rollback'; request: RollbackRequest }
  | { cmd: 'gc'; keepMs?: number; maxBytes?: number }
  | { cmd: 'tag'; request: TagRequest }
  | { cmd: 'sync' }
  | { cmd: 'status' }
  | { cmd: 'freeze'; frozen: boolean }
  | { cmd: 'apply'; options: unknown }
  | { cmd: 'discard'; options: unknown };

type Reply = { type: 'progress'; done: number; total: number } | { type: 'result'; result: unknown } | { type: 'error'; message: string };

/** Unix socket paths are limited to 107 bytes; a deep state dir gets one in the temp dir instead. */
function socketPathFor(stateDir: string): string {
  const p = stateLayout(stateDir).daemonSocket;
  if (Buffer.byteLength(p) <= 100) return p;
  return path.join(os.tmpdir(), `ledgerfs-${crypto.createHash('sha256').update(stateDir).digest('hex').slice(0, 16)}.sock`);
}

export interface ControlServerOptions {
  mountpoint: string;
  /** after a rollback, before answering: the kernel forgets what it cached of these paths
   * (their attributes, pages and names), or, where the binding cannot tell it (fuse-native),
   * its caches are waited out */
  forgetCached(paths: string[]): Promise<void>;
  log: Logger;
  /** a staged mount's review commands; absent on a live mount, which has nothing to hold for review */
  staged?: StagedControl;
}

/**
 * What a staged mount's daemon does for `ledgerfs freeze`, `apply` and `discard` (app/staged.ts:
 * the journal layer only carries the request and the answer). A refusal is a ControlRefusal.
 */
export interface StagedControl {
  /** read-only (true) or writable again (false) */
  freeze(frozen: boolean): void;
  apply(options: unknown, onProgress: (done: number, total: number) => void): Promise<unknown>;
  discard(options: unknown): Promise<unknown>;
}

/** A control request the daemon refuses with a sentence (not a failure of the daemon). */
export class ControlRefusal extends Error {}

export class ControlServer {
  private constructor(
    private readonly server: net.Server,
    private readonly socket: string,
    private readonly infoFile: string,
  ) {}

  static async start(service: JournalService, o: ControlServerOptions): Promise<ControlServer> {
    const socket = socketPathFor(service.stateDir);
    fs.rmSync(socket, { force: true }); // we hold the journal lock: any socket there is stale
    const server = net.createServer((conn) => handle(conn, service, o));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socket, () => resolve());
    });
    fs.chmodSync(socket, 0o600);
    const info: DaemonInfo = { pid: process.pid, socket, mountpoint: o.mountpoint, session: service.session, started: new Date().toISOString() };
    const infoFile = stateLayout(service.stateDir).daemonInfo;
    fs.writeFileSync(infoFile, JSON.stringify(info, null, 2) + '\n', { mode: 0o600 });
    return new ControlServer(server, socket, infoFile);
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    fs.rmSync(this.socket, { force: true });
    fs.rmSync(this.infoFile, { force: true });
  }
}

function handle(conn: net.Socket, service: JournalService, o: ControlServerOptions): void {
  let buf = '';
  let started = false;
  const send = (r: Reply) => {
    if (!conn.destroyed) conn.write(JSON.stringify(r) + '\n');
  };
  conn.on('error', () => undefined);
  conn.on('data', (d) => {
    buf += d.toString('utf8');
    const nl = buf.indexOf('\n');
    if (nl < 0 || started) return;
    started = true;
    let req: ControlRequest;
    try {
      req = JSON.parse(buf.slice(0, nl)) as ControlRequest;
    } catch {
      send({ type: 'error', message: 'malformed request' });
      conn.end();
      return;
    }
    void serve(req, service, o, send).then(
      () => conn.end(),
      (err: unknown) => {
        if (!(err instanceof RollbackError) && !(err instanceof JournalDamagedError) && !(err instanceof TagError) && !(err instanceof ControlRefusal)) o.log.error({ err: (err as Error).stack ?? String(err), cmd: req.cmd }, 'control request failed');
        send({ type: 'error', message: (err as Error).message });
        conn.end();
      },
    );
  });
}

async function serve(req: ControlRequest, service: JournalService, o: ControlServerOptions, send: (r: Reply) => void): Promise<void> {
  switch (req.cmd) {
    case 'rollback': {
      // the daemon's Vfs is the overlay: an undo through it would land there, not in the workspace
      if (o.staged) throw new ControlRefusal(`the workspace is mounted at ${o.mountpoint} as a staged session (${service.session}), whose view is its overlay; rollback needs it unmounted (ledgerfs unmount ${o.mountpoint})`);
      let last = 0;
      o.log.info({ request: req.request }, 'rollback requested');
      const result = await service.rollback(req.request, (done, total) => {
        const now = Date.now();
        if (now - last >= 100 || done === total) {
          last = now;
          send({ type: 'progress', done, total });
        }
      });
      if (result.undone > 0) await o.forgetCached([...new Set(result.planned.flatMap((s) => s.paths))]);
      o.log.info({ undone: result.undone, conflicts: result.conflicts.length, session: result.session }, 'rollback finished');
      send({ type: 'result', result });
      return;
    }
    case 'gc': {
      const result = await service.gc(req.keepMs, req.maxBytes !== undefined ? { maxBytes: req.maxBytes } : {});
      o.log.info(result, 'journal gc finished');
      send({ type: 'result', result });
      return;
    }
    case 'tag': {
      const result = await service.tag(req.request);
      o.log.info({ tag: result.name, at: result.at, session: result.session }, 'journal tagged');
      send({ type: 'result', result });
      return;
    }
    case 'sync':
      await service.writer.sync();
      send({ type: 'result', result: {} });
      return;
    case 'status':
      send({ type: 'result', result: { session: service.session, lastSeq: service.writer.lastSeq, mountpoint: o.mountpoint, pid: process.pid } });
      return;
    case 'freeze':
      stagedOf(o).freeze(req.frozen);
      o.log.info({ frozen: req.frozen }, req.frozen ? 'staged session frozen for review' : 'staged session writable again');
      send({ type: 'result', result: { session: service.session, mountpoint: o.mountpoint, frozen: req.frozen } });
      return;
    case 'apply': {
      let last = 0;
      const result = await stagedOf(o).apply(req.options, (done, total) => {
        const now = Date.now();
        if (now - last >= 100 || done === total) {
          last = now;
          send({ type: 'progress', done, total });
        }
      });
      send({ type: 'result', result });
      return;
    }
    case 'discard':
      send({ type: 'result', result: await stagedOf(o).discard(req.options) });
      return;
  }
}

function stagedOf(o: ControlServerOptions): StagedControl {
  if (!o.staged) throw new ControlRefusal(`the mount at ${o.mountpoint} is not staged (mount --staged): its changes reach the workspace at once, there is nothing to hold for review`);
  return o.staged;
}

// ---- client ----------------------------------------------------------------------------------

/** The daemon serving this state directory, if one is running. */
export function liveDaemon(stateDir: string): DaemonInfo | null {
  const layout = stateLayout(stateDir);
  let info: DaemonInfo;
  try {
    info = JSON.parse(fs.readFileSync(layout.daemonInfo, 'utf8')) as DaemonInfo;
  } catch {
    return null;
  }
  const holder = JournalLock.liveHolder(layout.lockFile);
  return holder && holder.pid === info.pid ? info : null;
}

export class DaemonUnreachableError extends Error {
  /** the request reached the daemon (it may have acted on it); false: the connection was never made */
  constructor(message: string, readonly sent: boolean) {
    super(message);
  }
}

/**
 * Wait (a bounded while) until daemon `pid` no longer serves or holds the journal: one that is
 * exiting (its socket gone, right after `ledgerfs unmount` returned) lets the next command
 * (rollback, apply, tag, gc) work on the unmounted workspace. False if it still holds it.
 */
export async function daemonGone(stateDir: string, pid: number, ms = DEFAULTS.unmountReleaseWaitMs): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    if (liveDaemon(stateDir)?.pid !== pid && JournalLock.liveHolder(stateLayout(stateDir).lockFile)?.pid !== pid) return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The daemon answered the request with an error (a refusal, or what went wrong), in its words. */
export class DaemonRefusal extends RollbackError {}

export function daemonRequest<T>(info: DaemonInfo, req: ControlRequest, onProgress?: (done: number, total: number) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const conn = net.createConnection(info.socket);
    let buf = '';
    let settled = false;
    let sent = false;
    const finish = (fn: () => void) => {
      if (!settled) {
        settled = true;
        fn();
      }
    };
    conn.on('connect', () => {
      sent = true;
      conn.write(JSON.stringify(req) + '\n');
    });
    conn.on('error', (err) =>
      finish(() => reject(new DaemonUnreachableError(`cannot reach the daemon (pid ${info.pid}) at ${info.socket}: ${err.message}`, sent))),
    );
    conn.on('data', (d) => {
      buf += d.toString('utf8');
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        const r = JSON.parse(line) as Reply;
        if (r.type === 'progress') onProgress?.(r.done, r.total);
        else if (r.type === 'result') finish(() => resolve(r.result as T));
        else finish(() => reject(new DaemonRefusal(r.message)));
      }
    });
    conn.on('close', () => finish(() => reject(new DaemonUnreachableError(`the daemon (pid ${info.pid}) closed the connection without an answer`, sent))));
  });
}
