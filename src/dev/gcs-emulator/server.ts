import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { EmulatorError } from './errors.js';
import { FaultInjector, type FaultSpec, type OutageSpec } from './faults.js';
import { errorReply, json, parseJsonBody, readBody, send, type Reply, type RequestContext } from './http.js';
import { route } from './router.js';
import { ObjectRateLimiter, type ObjectRateLimit } from './object-rate.js';
import { EmulatorStore } from './store.js';

export interface GcsEmulatorOptions {
  /** 0 or absent: a free port chosen by the OS */
  port?: number;
  /** default 127.0.0.1; the emulator has no authentication, keep it on loopback */
  host?: string;
  /** reuse a store, e.g. to restart the server on the same data */
  store?: EmulatorStore;
  /** one line per request, for debugging */
  log?: (line: string) => void;
  /** GCS's per-object mutation rate (429 beyond it); default: unlimited. See object-rate.ts */
  objectRateLimit?: ObjectRateLimit;
}

export interface GcsEmulator {
  /** http://host:port, the value for the client's `apiEndpoint` */
  url: string;
  port: number;
  store: EmulatorStore;
  faults: FaultInjector;
  stats(): EmulatorStats;
  /** Close the listener and every open connection; resolves when closed. */
  stop(): Promise<void>;
}

/** One answered JSON API request, for tests that count what a client asks per operation. */
export interface LoggedRequest {
  /** 1, 2, ... in arrival order (equal to stats.requests when it arrived) */
  seq: number;
  method: string;
  /** the decoded path, e.g. /upload/storage/v1/b/B/o or /storage/v1/b/B/o/dir/name */
  path: string;
  /** the query string, with its "?" ("" for none) */
  query: string;
}

/** The request log keeps this many of the latest requests (a ring). */
const REQUEST_LOG_MAX = 20_000;

export interface EmulatorStats {
  requests: number;
  faultsInjected: number;
  byMethod: Record<string, number>;
}

function splitPath(pathname: string): string[] {
  return pathname
    .split('/')
    .slice(1)
    .map((seg) => {
      try {
        return decodeURIComponent(seg);
      } catch {
        return seg;
      }
    });
}

/** Admin endpoints under /_emulator/: health, faults, stats, reset (documented in README.md). */
function admin(ctx: RequestContext, emu: { store: EmulatorStore; faults: FaultInjector; stats: EmulatorStats; log: LoggedRequest[] }): Reply {
  const what = ctx.segments[1];
  if (what === 'health' && ctx.method === 'GET') return json({ ok: true });
  if (what === 'requests' && ctx.method === 'GET') {
    const since = Number(ctx.query.get('since') ?? 0);
    return json({ requests: emu.log.filter((r) => r.seq > since) });
  }
  if (what === 'stats' && ctx.method === 'GET') return json({ ...emu.stats, faultsInjected: emu.faults.injected });
  if (what === 'reset' && ctx.method === 'POST') {
    emu.store.reset();
    emu.faults.clear();
    return json({ ok: true });
  }
  if (what === 'outage') {
    if (ctx.method === 'GET') return json({ outage: emu.faults.outage() ?? null });
    if (ctx.method === 'DELETE') {
      emu.faults.endOutage();
      return { status: 204 };
    }
    if (ctx.method === 'POST') return json({ outage: emu.faults.startOutage(parseJsonBody(ctx) as unknown as OutageSpec) });
  }
  if (what === 'faults') {
    if (ctx.method === 'GET') return json({ rules: emu.faults.list() });
    if (ctx.method === 'DELETE') {
      emu.faults.clear();
      return { status: 204 };
    }
    if (ctx.method === 'POST') {
      const parsed = JSON.parse(ctx.body.toString('utf8') || '{}') as FaultSpec | FaultSpec[];
      const specs = Array.isArray(parsed) ? parsed : [parseJsonBody(ctx) as FaultSpec];
      return json({ rules: specs.map((s) => emu.faults.add(s)) });
    }
  }
  return json({ error: { code: 404, message: `unknown admin endpoint ${ctx.method} /${ctx.segments.join('/')}` } }, 404);
}

/**
 * Start a GCS JSON API emulator on 127.0.0.1 (see README.md for what it implements). Tests start
 * one per file on a free port and stop it in afterAll.
 */
export async function startGcsEmulator(opts: GcsEmulatorOptions = {}): Promise<GcsEmulator> {
  const store = opts.store ?? new EmulatorStore();
  if (opts.objectRateLimit) store.objectRate = new ObjectRateLimiter(opts.objectRateLimit);
  const faults = new FaultInjector();
  const stats: EmulatorStats = { requests: 0, faultsInjected: 0, byMethod: {} };
  const log: LoggedRequest[] = [];
  const host = opts.host ?? '127.0.0.1';

  /** aborted by stop(): ends the waits of delayed faults */
  const stopping = new AbortController();
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://emulator');
    // An outage fails a request before its body is read, so nothing of it takes effect.
    const down = url.pathname.startsWith('/_emulator/') ? undefined : faults.outage();
    if (down) {
      faults.injected++;
      opts.log?.(`${req.method} ${url.pathname} -> outage (${down.reset ? 'reset' : down.status})`);
      if (down.reset) req.socket.destroy();
      else {
        // the body is not read: close the connection after the answer rather than drain it
        const reply = errorReply(injected(down.status));
        send(res, { ...reply, headers: { ...reply.headers, Connection: 'close' } });
      }
      return;
    }
    const body = await readBody(req);
    const ctx: RequestContext = {
      method: (req.method ?? 'GET').toUpperCase(),
      segments: splitPath(url.pathname),
      query: url.searchParams,
      headers: req.headers,
      body,
      baseUrl: `http://${req.headers.host ?? `${host}`}`,
    };
    if (ctx.segments[0] === '_emulator') {
      let reply: Reply;
      try {
        reply = admin(ctx, { store, faults, stats, log });
      } catch (err) {
        reply = errorReply(err);
      }
      send(res, reply);
      return;
    }
    stats.requests++;
    stats.byMethod[ctx.method] = (stats.byMethod[ctx.method] ?? 0) + 1;
    let decoded = url.pathname;
    try {
      decoded = decodeURIComponent(url.pathname);
    } catch {
      // keep the raw path
    }
    log.push({ seq: stats.requests, method: ctx.method, path: decoded, query: url.search });
    if (log.length > REQUEST_LOG_MAX) log.splice(0, log.length - REQUEST_LOG_MAX);
    const fault = faults.take(ctx.method, url.pathname, decoded);
    if (fault && fault.delayMs > 0) {
      // a stop ends the wait: a pending timer would keep a stopped emulator's process alive
      await sleep(fault.delayMs, undefined, { signal: stopping.signal }).catch(() => undefined);
      if (stopping.signal.aborted) {
        req.socket.destroy();
        return;
      }
    }
    const failNow = fault && fault.when === 'before' && (fault.status !== 0 || fault.reset);
    let reply: Reply;
    if (failNow) {
      if (fault.reset) {
        req.socket.destroy();
        return;
      }
      reply = errorReply(injected(fault.status));
    } else {
      try {
        reply = route(store, ctx);
      } catch (err) {
        reply = errorReply(err);
      }
      if (fault && fault.when === 'after' && (fault.status !== 0 || fault.reset)) {
        if (fault.reset) {
          req.socket.destroy();
          return;
        }
        reply = errorReply(injected(fault.status));
      }
    }
    opts.log?.(`${ctx.method} ${url.pathname}${url.search} -> ${reply.status}`);
    send(res, reply);
  };

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err) => {
      if (!res.headersSent) send(res, errorReply(err));
      else res.destroy();
    });
  });
  // Idle keep-alive connections stay open longer than a client keeps its end (Node's agents: 5 s),
  // as GCS's front ends do: with equal timeouts, a request sent on a socket idle for about 5 s
  // could meet the server's close ("socket hang up"). stop() closes every connection itself.
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  let stopped: Promise<void> | undefined;
  return {
    url: `http://${host}:${port}`,
    port,
    store,
    faults,
    stats: () => ({ ...stats, byMethod: { ...stats.byMethod }, faultsInjected: faults.injected }),
    stop() {
      stopped ??= new Promise<void>((resolve) => {
        stopping.abort();
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return stopped;
    },
  };
}

/** The error body of an injected fault, shaped like the real one for that status. */
function injected(status: number): EmulatorError {
  const messages: Record<number, string> = {
    429: 'The rate of change requests to the object is too high. (injected fault)',
    500: 'Internal error. (injected fault)',
    502: 'Bad gateway. (injected fault)',
    503: 'Service Unavailable. Backend Error (injected fault)',
    504: 'Gateway timeout. (injected fault)',
  };
  const reason = status === 429 ? 'rateLimitExceeded' : status >= 500 ? 'backendError' : 'injected';
  return new EmulatorError(status, reason, messages[status] ?? `Injected fault ${status}`);
}
