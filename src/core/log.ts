import fs from 'node:fs';
import tty from 'node:tty';
import pino, { type Logger } from 'pino';
import type { LogFormat, LogLevel } from '../config/index.js';

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

export interface LogOptions {
  /** append log lines to this file instead of stderr (`--log-file`) */
  file?: string;
  /** `text` (one readable line) or `json` (one object a line); default: text on a terminal, else json */
  format?: LogFormat;
}

const LEVEL_NAMES: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
const OMIT = new Set(['level', 'time', 'msg', 'pid', 'name', 'hostname']);

/** One pino JSON line as `2026-11-25T20:30:00.123Z INFO  mounted mountpoint=/mnt/ws ...`. */
export function textLine(json: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const time = typeof o.time === 'number' ? new Date(o.time).toISOString() : '';
  const level = (LEVEL_NAMES[o.level as number] ?? String(o.level)).padEnd(5);
  const rest = Object.entries(o)
    .filter(([k]) => !OMIT.has(k))
    .map(([k, v]) => `${k}=${typeof v === 'string' && !/[\s"=]/.test(v) && v !== '' ? v : JSON.stringify(v)}`);
  return `${time} ${level} ${String(o.msg ?? '')}${rest.length ? ' ' + rest.join(' ') : ''}\n`;
}

/** A pino destination writing each line as text, synchronously (a crash loses no line). */
function textDestination(fd: number): { write(line: string): boolean } {
  return {
    write(line: string) {
      try {
        fs.writeSync(fd, textLine(line.endsWith('\n') ? line.slice(0, -1) : line));
      } catch {
        /* stderr gone (a daemon's parent exited): nothing to tell */
      }
      return true;
    },
  };
}

/**
 * Logs go to stderr (fd 2), so stdout stays for command output that scripts read; or to
 * `opts.file`, appended. Text for a person at a terminal, JSON lines for everything else.
 */
export function createLogger(level: LogLevel, name = 'ledgerfs', opts: LogOptions = {}): Logger {
  const fd = opts.file !== undefined ? fs.openSync(opts.file, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_CREAT, 0o640) : 2;
  const format = opts.format ?? (opts.file === undefined && tty.isatty(2) ? 'text' : 'json');
  const dest = format === 'text' ? textDestination(fd) : pino.destination({ fd, sync: true });
  return pino({ name, level, base: { pid: process.pid }, redact: { paths: [...REDACTED_PATHS], censor: '[redacted]' } }, dest);
}

export const silentLogger: Logger = pino({ level: 'silent' });
