import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEFAULTS } from '../config/index.js';
import type { Logger } from '../core/index.js';
import type { DaemonMetrics } from './metrics.js';
import { UserError } from './errors.js';

/** `--metrics ADDR`: host:port, :port, port, or host (DEFAULTS.metricsPort). */
export function parseMetricsAddr(addr: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*))(?::(\d+))?$/.exec(addr.trim()) ?? /^()()(\d+)$/.exec(addr.trim());
  const bare = /^\d+$/.test(addr.trim());
  const host = bare ? '127.0.0.1' : (m?.[1] ?? m?.[2] ?? '') || '127.0.0.1';
  const port = Number(bare ? addr.trim() : (m?.[3] ?? DEFAULTS.metricsPort));
  if (!m || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new UserError(`--metrics: expected HOST:PORT, :PORT or PORT (e.g. 127.0.0.1:${DEFAULTS.metricsPort}), got ${JSON.stringify(addr)}`);
  }
  return { host, port };
}

/** What /healthz asks: null when healthy, else the reason it is not. */
export type HealthCheck = () => Promise<string | null>;

export interface MetricsServer {
  readonly url: string;
  close(): Promise<void>;
}

/**
 * /metrics (Prometheus text) and /healthz (200 "ok", or 503 and the reason). The health check
 * runs in this process, so it never touches the mount point: a daemon calling into its own
 * mount deadlocks (the request waits for the thread that would answer it).
 */
export async function serveMetrics(addr: string, metrics: DaemonMetrics, health: HealthCheck, log: Logger): Promise<MetricsServer> {
  const { host, port } = parseMetricsAddr(addr);
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (path === '/metrics') {
      metrics.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
        (err: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${(err as Error).message}\n`),
      );
      return;
    }
    if (path === '/healthz') {
      health().then(
        (problem) => res.writeHead(problem === null ? 200 : 503, { 'content-type': 'text/plain' }).end(problem === null ? 'ok\n' : `${problem}\n`),
        (err: unknown) => res.writeHead(503, { 'content-type': 'text/plain' }).end(`health check failed: ${(err as Error).message}\n`),
      );
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('try /metrics or /healthz\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(new UserError(`--metrics ${addr}: cannot listen on ${host}:${port}: ${err.code === 'EADDRINUSE' ? 'the port is in use' : err.message}`)),
    );
    server.listen(port, host, () => resolve());
  });
  const bound = server.address() as AddressInfo;
  const url = `http://${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}`;
  log.info({ metrics: `${url}/metrics`, health: `${url}/healthz` }, 'metrics served');
  return {
    url,
    close: () => new Promise<void>((r) => {
      server.close(() => r());
      server.closeAllConnections();
    }),
  };
}
