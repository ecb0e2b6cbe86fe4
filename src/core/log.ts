import pino, { type Logger } from 'pino';
import type { LogLevel } from '../config/index.js';

export type { Logger };

/** Logs go to stderr (fd 2), so stdout stays for command output that scripts read. */
export function createLogger(level: LogLevel, name = 'ledgerfs'): Logger {
  return pino({ name, level, base: { pid: process.pid } }, pino.destination({ fd: 2, sync: true }));
}

export const silentLogger: Logger = pino({ level: 'silent' });
