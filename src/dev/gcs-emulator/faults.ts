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
  delayMs: number;
  /** 'before': the request has no effect; 'after': it takes effect, then the reply is replaced */
  when: 'before' | 'after';
  /** destroy the socket instead of answering (a connection reset seen by the client) */
  reset: boolean;
}

export type FaultSpec = Partial<Omit<FaultRule, 'id'>>;

export class FaultInjector {
  private rules: FaultRule[] = [];
  private nextId = 1;
  injected = 0;

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
    };
    this.rules.push(rule);
    return rule;
  }

  clear(): void {
    this.rules = [];
  }

  list(): FaultRule[] {
    return this.rules.map((r) => ({ ...r }));
  }

  /** The first live rule matching this request, consuming one of its uses. */
  take(method: string, rawPath: string, decodedPath: string): FaultRule | undefined {
    const i = this.rules.findIndex(
      (r) => (!r.method || r.method === method) && (!r.pathPrefix || rawPath.startsWith(r.pathPrefix) || decodedPath.startsWith(r.pathPrefix)),
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
