import type { IncomingMessage, ServerResponse } from 'node:http';
import { EmulatorError } from './errors.js';

/** One request as the handlers see it: path already split into decoded segments, body read. */
export interface RequestContext {
  method: string;
  /** decoded path segments, e.g. ['storage','v1','b','bkt','o','a/b.txt'] */
  segments: string[];
  query: URLSearchParams;
  headers: IncomingMessage['headers'];
  body: Buffer;
  /** scheme://host:port the client used, for Location headers and links */
  baseUrl: string;
}

export interface Reply {
  status: number;
  headers?: Record<string, string | number>;
  /** JSON value, raw bytes, or nothing */
  json?: unknown;
  raw?: Buffer;
}

export function json(value: unknown, status = 200, headers: Record<string, string | number> = {}): Reply {
  return { status, json: value, headers };
}

export function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

export function parseJsonBody(ctx: RequestContext): Record<string, unknown> {
  if (ctx.body.length === 0) return {};
  try {
    const v = JSON.parse(ctx.body.toString('utf8')) as unknown;
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
    return v as Record<string, unknown>;
  } catch {
    throw new EmulatorError(400, 'parseError', 'Parse Error');
  }
}

export function send(res: ServerResponse, reply: Reply): void {
  const headers: Record<string, string | number> = { ...reply.headers };
  let body: Buffer | undefined;
  if (reply.json !== undefined) {
    body = Buffer.from(JSON.stringify(reply.json));
    headers['Content-Type'] = 'application/json; charset=UTF-8';
  } else if (reply.raw) {
    body = reply.raw;
  }
  headers['Content-Length'] = body ? body.length : 0;
  res.writeHead(reply.status, headers);
  res.end(body);
}

export function errorReply(err: unknown): Reply {
  if (err instanceof EmulatorError) {
    // 304 has no body by definition.
    return err.status === 304 ? { status: 304 } : json(err.toJSON(), err.status);
  }
  const e = new EmulatorError(500, 'backendError', `internal emulator error: ${(err as Error)?.message ?? String(err)}`);
  return json(e.toJSON(), 500);
}
