import fs from 'node:fs';
import tty from 'node:tty';
import { Worker } from 'node:worker_threads';
import pino, { type Logger } from 'pino';
import { DEFAULTS, type LogFormat, type LogLevel } from '../config/index.js';
import { printable } from './names.js';

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
  // a refusal's path was chosen by the program refused: its ESC or newline must not reach the terminal raw
  return `${printable(`${time} ${level} ${String(o.msg ?? '')}${rest.length ? ' ' + rest.join(' ') : ''}`)}\n`;
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

/** Whether `fd` is a pipe or a socket: a reader that stops reading blocks a write there forever. */
function isPipe(fd: number): boolean {
  try {
    const st = fs.fstatSync(fd);
    return st.isFIFO() || st.isSocket();
  } catch {
    return false;
  }
}

// The pipe writer's thread: writes each line it is handed, whole, and counts it off. It may
// block, or wait out EAGAIN (a Node parent's stdio socket is non-blocking): it is not the
// thread that serves the mount.
const PIPE_WRITER = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const pending = new Int32Array(workerData.pending);
const nap = new Int32Array(new SharedArrayBuffer(4));
parentPort.on('message', (line) => {
  const buf = Buffer.from(line);
  for (let off = 0; off < buf.length; ) {
    try {
      off += fs.writeSync(workerData.fd, buf, off);
    } catch (err) {
      if (err.code !== 'EAGAIN') break; // the reader is gone
      Atomics.wait(nap, 0, 0, 5);
    }
  }
  Atomics.sub(pending, 0, line.length);
});`;

/**
 * A pipe's reader (a supervisor, a parent process) may stop reading. A write to the full pipe
 * would then block the daemon's only JS thread, and every program using the mount with it. So on
 * a pipe or socket a worker thread does the writing: lines it has not written yet are counted,
 * and past DEFAULTS.logPipeBufferBytes further lines are dropped (and their number logged once
 * there is room) instead of the mount stalling. Files and terminals are written synchronously:
 * they cannot stall, and a crash then loses no line.
 */
class PipeDestination {
  private readonly pending = new Int32Array(new SharedArrayBuffer(4));
  // started by the first line: most commands log nothing
  private worker: Worker | undefined;
  private dropped = 0;
  constructor(
    private readonly fd: number,
    private readonly format: LogFormat,
  ) {}

  write(line: string): boolean {
    const text = this.format === 'text' ? textLine(line.endsWith('\n') ? line.slice(0, -1) : line) : line;
    const max = DEFAULTS.logPipeBufferBytes;
    if (Atomics.load(this.pending, 0) + text.length > max) {
      this.dropped++;
      return true;
    }
    if (this.dropped > 0) {
      const n = this.dropped;
      this.dropped = 0;
      const note = JSON.stringify({ level: 40, time: Date.now(), pid: process.pid, msg: `${n} log lines were dropped: the log's pipe was not being read` }) + '\n';
      this.post(this.format === 'text' ? textLine(note.slice(0, -1)) : note);
    }
    this.post(text);
    return true;
  }

  private post(text: string): void {
    if (this.worker === undefined) {
      this.worker = new Worker(PIPE_WRITER, { eval: true, workerData: { fd: this.fd, pending: this.pending.buffer } });
      this.worker.unref();
    }
    Atomics.add(this.pending, 0, text.length);
    this.worker.postMessage(text);
  }

  /**
   * Resolves once every line handed over is written, or when the reader has taken nothing for
   * `timeoutMs` (it stopped reading: what is left is lost with the process).
   */
  async drain(timeoutMs: number): Promise<void> {
    let left = Atomics.load(this.pending, 0);
    let until = Date.now() + timeoutMs;
    while (left > 0 && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 5));
      const now = Atomics.load(this.pending, 0);
      if (now < left) until = Date.now() + timeoutMs;
      left = now;
    }
  }
}

const pipeDestinations = new Set<PipeDestination>();

/**
 * Logs go to stderr (fd 2), so stdout stays for command output that scripts read; or to
 * `opts.file`, appended. Text for a person at a terminal, JSON lines for everything else.
 */
export function createLogger(level: LogLevel, name = 'ledgerfs', opts: LogOptions = {}): Logger {
  const fd = opts.file !== undefined ? fs.openSync(opts.file, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_CREAT, 0o640) : 2;
  const format = opts.format ?? (opts.file === undefined && tty.isatty(2) ? 'text' : 'json');
  const pipe = isPipe(fd) ? new PipeDestination(fd, format) : undefined;
  const dest = pipe ?? (format === 'text' ? textDestination(fd) : pino.destination({ fd, sync: true }));
  const logger = pino({ name, level, base: { pid: process.pid }, redact: { paths: [...REDACTED_PATHS], censor: '[redacted]' } }, dest);
  if (pipe) pipeDestinations.add(pipe);
  return logger;
}

/**
 * Before the process ends: wait for the pipe writers to write what they were handed, giving up on
 * a reader that takes nothing for `timeoutMs`. Other destinations are written synchronously:
 * nothing to wait for.
 */
export async function flushLogs(timeoutMs = DEFAULTS.logFlushTimeoutMs): Promise<void> {
  await Promise.all([...pipeDestinations].map((p) => p.drain(timeoutMs)));
}

export const silentLogger: Logger = pino({ level: 'silent' });
