import crypto from 'node:crypto';

/**
 * A session id people can read and sort: the UTC start time plus 4 random hex digits, e.g.
 * 2026-11-22T05-30-12-ab12 (colons would need quoting in shells and file names).
 */
export function newSessionId(prefix = ''): string {
  const t = new Date().toISOString().slice(0, 19).replace(/:/g, '-');
  return `${prefix}${t}-${crypto.randomBytes(2).toString('hex')}`;
}
