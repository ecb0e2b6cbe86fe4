import { constants } from 'node:os';

/**
 * The one errno table. Every layer raises `VfsError` with a symbolic code; the FUSE adapter
 * turns it into the negative errno the kernel expects. Numbers come from the platform, never
 * hard-coded, so the table stays right wherever Node runs.
 */
export type ErrnoCode =
  | 'EPERM' | 'ENOENT' | 'EIO' | 'EBADF' | 'EAGAIN' | 'EACCES' | 'EBUSY' | 'EEXIST' | 'EXDEV'
  | 'ENOTDIR' | 'EISDIR' | 'EINVAL' | 'EMFILE' | 'EFBIG' | 'ENOSPC' | 'EROFS' | 'EMLINK'
  | 'ENAMETOOLONG' | 'ENOSYS' | 'ENOTEMPTY' | 'ELOOP' | 'ENODATA' | 'ENOTSUP' | 'EDQUOT'
  | 'ESTALE' | 'ERANGE' | 'ETIMEDOUT' | 'ENOTCONN' | 'EOPNOTSUPP' | 'E2BIG' | 'ENXIO' | 'ENFILE' | 'EILSEQ';

const table = constants.errno as Record<string, number>;

export function errnoOf(code: ErrnoCode): number {
  const n = table[code];
  if (n === undefined) throw new Error(`errno ${code} unknown on this platform`);
  return n;
}

/** The name of an errno number (a native helper's result), e.g. 2 -> 'ENOENT'. */
export function errnoName(n: number): string {
  return names.get(n) ?? `errno ${n}`;
}
// first name wins where two share a number (EAGAIN/EWOULDBLOCK, ENOTSUP/EOPNOTSUPP), as libuv names them
const names = new Map<number, string>();
for (const [name, v] of Object.entries(table)) if (!names.has(v)) names.set(v, name);

/** Negative errno for the kernel; anything that is not a VfsError is an EIO. */
export function kernelErrno(err: unknown): number {
  if (err instanceof VfsError) return -errnoOf(err.code);
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code && table[code] !== undefined) return -(table[code] as number);
  return -errnoOf('EIO');
}

/**
 * How loudly a failure is logged where it is answered: an expected answer (ENOENT to a lookup,
 * EACCES to a refused write) is not logged at all; an unexpected one (the backend failing) is.
 */
export type FailureLevel = 'warn' | 'error';

export interface VfsErrorOptions {
  /** what went wrong underneath (a client error, a Node fs error), for the log line */
  cause?: unknown;
  /** set when the failure is unexpected and an operator should see it (see failureLevel) */
  level?: FailureLevel;
}

/** An error as a value: the errno for the kernel, a sentence for people (logs, journal, denials). */
export class VfsError extends Error {
  readonly code: ErrnoCode;
  readonly reason: string;
  readonly level: FailureLevel | undefined;
  constructor(code: ErrnoCode, reason: string, options?: VfsErrorOptions) {
    // These are answers, not faults (ENOENT to every lookup of a name about to be created,
    // EACCES to a refused write), thousands a second: capturing a stack cost more than the
    // syscall they answer. Unexpected failures are not VfsErrors and keep their stacks.
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(`${code}: ${reason}`, options?.cause !== undefined ? { cause: options.cause } : undefined);
    Error.stackTraceLimit = limit;
    this.code = code;
    this.reason = reason;
    this.level = options?.level;
  }
}

/** errnos no program expects from a working filesystem: whoever raises them meant a fault */
const UNEXPECTED: ReadonlySet<string> = new Set(['EIO', 'ENOTCONN', 'ETIMEDOUT']);

/**
 * The level an operator should see a failed request at, or undefined for an answer a program
 * expects (ENOENT, EEXIST, EACCES, ...). Anything that is not a VfsError is a bug or a fault.
 */
export function failureLevel(err: unknown): FailureLevel | undefined {
  if (!(err instanceof VfsError)) return 'error';
  return err.level ?? (UNEXPECTED.has(err.code) ? 'warn' : undefined);
}

/**
 * A one-line account of a failure's cause (`name: message`, and an HTTP status or errno code if
 * it has one). Only these fields: a whole client error carries its request, headers and all.
 */
export function describeCause(err: unknown): string | undefined {
  const cause = err instanceof VfsError ? err.cause : err;
  if (cause === undefined || cause === null) return undefined;
  if (typeof cause !== 'object') return String(cause);
  const e = cause as { name?: unknown; message?: unknown; code?: unknown; status?: unknown };
  const name = typeof e.name === 'string' ? e.name : 'Error';
  const code = typeof e.code === 'string' || typeof e.code === 'number' ? ` [${e.code}]` : typeof e.status === 'number' ? ` [${e.status}]` : '';
  return `${name}${code}: ${typeof e.message === 'string' ? e.message : String(cause)}`;
}

export function vfsError(code: ErrnoCode, reason: string): VfsError {
  return new VfsError(code, reason);
}

/** Convert a Node fs error into a VfsError, keeping its errno; unknown causes become EIO. */
export function fromNodeError(err: unknown, what: string): VfsError {
  if (err instanceof VfsError) return err;
  const e = err as NodeJS.ErrnoException;
  const code = e?.code;
  if (code && table[code] !== undefined) return new VfsError(code as ErrnoCode, `${what}: ${e.message}`, { cause: err });
  return new VfsError('EIO', `${what}: ${e?.message ?? String(err)}`, { cause: err, level: 'error' });
}
