import { badRequest } from './errors.js';

/**
 * Fault injection for tests, driven over HTTP through the admin endpoint (see README.md):
 * a rule matches requests by method and path prefix and, `count` times, answers with `status`
 * (before the request takes effect, or after it, which simulates a lost response), drops the
 * connection, or only delays the request.
 */
export interface FaultRule {
  id: number;
  /** HTTP status to answer with; 0 = no error (a pure delay) */
  status: number;
  /** how many matching requests to affect; -1 = until cleared */
  count: number;
  method?: string;
  /** matched against the request path, raw or percent-decoded */
  pathPrefix?: string;
  /** matched against the whole request path, raw or percent-decoded (e.g. the bucket's own path, not its objects') */
  path?: string;
  delayMs: number;
  /** 'before': the request has no effect; 'after': it takes effect, then the reply is replaced */
  when: 'before' | 'after';
  /** destroy the socket instead of answering (a connection reset seen by the client) */
  reset: boolean;
}

export type FaultSpec = Partial<Omit<FaultRule, 'id'>>;

/**
 * An outage: for `ms` from when it is started, every request (admin calls excepted) fails
 * before it takes effect, with `status` or, with `reset`, by the connection being dropped as
 * soon as the request arrives (what a client sees of a server that went away).
 */
export interface OutageSpec {
  ms: number;
  /** default 503 */
  status?: number;
  reset?: boolean;
}

export interface Outage {
  /** epoch ms the outage ends at */
  until: number;
  status: number;
  reset: boolean;
}

export class FaultInjector {
  private rules: FaultRule[] = [];
  private nextId = 1;
  private down: Outage | undefined;
  injected = 0;

  startOutage(spec: OutageSpec): Outage {
    const ms = Number(spec.ms);
    if (!Number.isFinite(ms) || ms <= 0) throw badRequest(`outage "ms" must be a positive number, got ${spec.ms}`);
    const status = spec.status ?? 503;
    if (!Number.isInteger(status) || status < 400 || status > 599) throw badRequest(`outage status must be 400..599, got ${spec.status}`);
    this.down = { until: Date.now() + ms, status, reset: spec.reset ?? false };
    return { ...this.down };
  }

  endOutage(): void {
    this.down = undefined;
  }

  /** The outage in force now, if any (each request it fails counts as an injected fault). */
  outage(): Outage | undefined {
    if (this.down && Date.now() >= this.down.until) this.down = undefined;
    return this.down ? { ...this.down } : undefined;
  }

  add(spec: FaultSpec): FaultRule {
    const status = spec.status ?? 503;
    if (!Number.isInteger(status) || (status !== 0 && (status < 400 || status > 599))) throw badRequest(`fault status must be 0 or 400..599, got ${spec.status}`);
    const when = spec.when ?? 'before';
    if (when !== 'before' && when !== 'after') throw badRequest(`fault "when" must be "before" or "after"`);
    const rule: FaultRule = {
      id: this.nextId++,
      status,
      count: spec.count ?? 1,
      delayMs: Math.max(0, spec.delayMs ?? 0),
      when,
      reset: spec.reset ?? false,
      ...(spec.method ? { method: spec.method.toUpperCase() } : {}),
      ...(spec.pathPrefix ? { pathPrefix: spec.pathPrefix } : {}),
      ...(spec.path ? { path: spec.path } : {}),
    };
    this.rules.push(rule);
    return rule;
  }

  clear(): void {
    this.rules = [];
    this.down = undefined;
  }

  list(): FaultRule[] {
    return this.rules.map((r) => ({ ...r }));
  }

  /** The first live rule matching this request, consuming one of its uses. */
  take(method: string, rawPath: string, decodedPath: string): FaultRule | undefined {
    const i = this.rules.findIndex(
      (r) => (!r.method || r.method === method) && (!r.pathPrefix || rawPath.startsWith(r.pathPrefix) || decodedPath.startsWith(r.pathPrefix)) &&
        (!r.path || rawPath === r.path || decodedPath === r.path),
    );
    if (i < 0) return undefined;
    const r = this.rules[i] as FaultRule;
    if (r.count > 0) {
      r.count--;
      if (r.count === 0) this.rules.splice(i, 1);
    }
    this.injected++;
    return { ...r };
  }
}
