import pino, { type Logger } from 'pino';
import type { LogLevel } from '../config/index.js';

export type { Logger };

/**
 * Where credentials sit in what might be logged: a client error carries its request (headers
 * with the bearer token, the OAuth request with its signed assertion), a service-account key
 * its private key. Log calls pass sentences, not such objects; this is the net under them.
 * pino's paths take one wildcard level, so the usual depths are listed.
 */
export const REDACTED_PATHS: readonly string[] = (() => {
  const secrets = ['authorization', 'Authorization', 'cookie', 'Cookie', 'x-goog-api-key', 'proxy-authorization'];
  const headerHolders = ['headers', 'req.headers', 'request.headers', 'config.headers', 'response.config.headers', 'options.headers'];
  const out: string[] = [];
  for (const holder of headerHolders) {
    for (const h of secrets) {
      out.push(`${holder}["${h}"]`, `*.${holder}["${h}"]`);
    }
  }
  for (const key of ['private_key', 'private_key_id', 'client_secret', 'refresh_token', 'access_token', 'id_token', 'token', 'password', 'assertion', 'credentials', 'apiKey']) {
    out.push(key, `*.${key}`, `*.*.${key}`);
  }
  // a token request's body (grant_type=...&assertion=JWT) and a key file's contents
  out.push('config.data', '*.config.data', 'config.body', '*.config.body');
  return out;
})();

/** Logs go to stderr (fd 2), so stdout stays for command output that scripts read. */
export function createLogger(level: LogLevel, name = 'ledgerfs'): Logger {
  return pino({ name, level, base: { pid: process.pid }, redact: { paths: [...REDACTED_PATHS], censor: '[redacted]' } }, pino.destination({ fd: 2, sync: true }));
}

export const silentLogger: Logger = pino({ level: 'silent' });
