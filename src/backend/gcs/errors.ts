import { VfsError } from '../../core/index.js';

/*
 * How errors from @google-cloud/storage are read. The client reports an HTTP failure as an
 * ApiError whose `code` is the status; a transport failure (refused, reset, timeout) as a
 * FetchError/GaxiosError with a string `code` such as "ECONNRESET"; a resumable-upload failure
 * as a GaxiosError with `status`, or, once the upload's own retries are used up, as a plain
 * Error with the status in its message. These helpers look at all of these shapes.
 */

interface ErrorLike {
  code?: unknown;
  status?: unknown;
  response?: { status?: unknown };
  message?: unknown;
  type?: unknown;
  errors?: Array<{ reason?: unknown }>;
}

export function httpStatus(err: unknown): number | undefined {
  const e = err as ErrorLike | undefined;
  if (!e || typeof e !== 'object') return undefined;
  if (typeof e.code === 'number') return e.code;
  if (typeof e.code === 'string' && /^\d{3}$/.test(e.code)) return Number(e.code);
  if (typeof e.response?.status === 'number') return e.response.status;
  if (typeof e.status === 'number') return e.status;
  // A failed resumable chunk ends as a plain Error whose only trace of the status is its text:
  // "Retry limit exceeded - status: 503 - {...}".
  const m = typeof e.message === 'string' ? /^Retry (?:total time )?limit exceeded - status: (\d{3})\b/.exec(e.message) : null;
  if (m) return Number(m[1]);
  return undefined;
}

export const isNotFound = (err: unknown) => httpStatus(err) === 404;
export const isPreconditionFailed = (err: unknown) => httpStatus(err) === 412;

const CONNECTION_CODES = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'EAI_AGAIN', 'ECONNABORTED', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_SOCKET', 'ERR_STREAM_PREMATURE_CLOSE']);
const CONNECTION_MESSAGES = /socket hang up|network timeout|ECONNRESET|ECONNREFUSED|EPIPE|premature close|other side closed|socket connection timeout|unexpected connection closure|aborted/i;

/** A failure a retry may cure: 408, 429, 5xx, or the connection failing/timing out. */
export function isTransient(err: unknown): boolean {
  const status = httpStatus(err);
  if (status !== undefined) return status === 408 || status === 429 || (status >= 500 && status <= 599);
  const e = err as ErrorLike | undefined;
  if (!e || typeof e !== 'object') return false;
  if (typeof e.code === 'string' && CONNECTION_CODES.has(e.code.toUpperCase())) return true;
  if (e.type === 'request-timeout' || e.type === 'system') return true;
  if (Array.isArray(e.errors) && e.errors.some((x) => typeof x?.reason === 'string' && CONNECTION_MESSAGES.test(x.reason))) return true;
  return typeof e.message === 'string' && CONNECTION_MESSAGES.test(e.message);
}

function messageOf(err: unknown): string {
  return (err as Error)?.message ?? String(err);
}

/**
 * An unexpected client error as a VfsError for the layers above. Status codes the backend
 * expects (404, 412) are handled where they mean something; what reaches here is mapped
 * generically: 404 ENOENT, 403/401 EACCES, 429/5xx/connection EIO (after retries gave up).
 */
export function toVfsError(err: unknown, what: string): VfsError {
  if (err instanceof VfsError) return err;
  const status = httpStatus(err);
  const msg = messageOf(err);
  if (status === 404) return new VfsError('ENOENT', `${what}: not found in the bucket (${msg})`);
  if (status === 401 || status === 403) return new VfsError('EACCES', `${what}: GCS refused access (${status}: ${msg})`);
  if (status === 412) return new VfsError('ESTALE', `${what}: the object changed in the bucket meanwhile (${msg})`);
  if (status === 400 && /name/i.test(msg)) return new VfsError('EINVAL', `${what}: GCS rejected the name (${msg})`);
  // what follows is the backend failing, not an answer: logged where the request is answered
  const fault = { cause: err, level: 'warn' } as const;
  if (status !== undefined) return new VfsError('EIO', `${what}: GCS answered ${status}: ${msg}`, fault);
  if (isTransient(err)) return new VfsError('EIO', `${what}: GCS could not be reached: ${msg}`, fault);
  const code = (err as ErrorLike)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new VfsError(code, `${what}: staging disk full: ${msg}`, fault);
  return new VfsError('EIO', `${what}: ${msg}`, { cause: err, level: 'error' });
}

/** True if the error says credentials are missing or unusable (not a permission refusal). */
export function isCredentialsError(err: unknown): boolean {
  const msg = messageOf(err);
  return /Could not load the default credentials|Unable to detect a Project Id|invalid_grant|Could not refresh access token|The incoming JSON object does not contain|private_key|client_email|key file|keyFilename/i.test(msg) || httpStatus(err) === 401;
}

/**
 * The sentence `createGcsBackend` fails with when the bucket cannot be used: it names the bucket
 * and, for credential problems, says how to provide credentials.
 */
export function setupErrorMessage(err: unknown, bucket: string, keyFile: string | undefined): string {
  const status = httpStatus(err);
  const msg = messageOf(err);
  if (status === 404) return `GCS bucket "${bucket}" does not exist (or is not visible with these credentials)`;
  if (status === 403) return `access to GCS bucket "${bucket}" was refused (403): a mount needs storage.objects.list on it (roles/storage.objectViewer; objectUser or objectAdmin to write): ${msg}`;
  const fileProblem = (err as ErrorLike)?.code === 'ENOENT' || (err as ErrorLike)?.code === 'EACCES';
  if (isCredentialsError(err) || (keyFile && fileProblem)) {
    const how = keyFile
      ? `check that the key file ${keyFile} exists, is readable, and holds a service-account JSON key`
      : 'provide Application Default Credentials (set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run `gcloud auth application-default login`, or run on GCP with a service account), or set backend.keyFile in the policy';
    return `no usable Google Cloud credentials for bucket "${bucket}": ${how} (${msg})`;
  }
  if (isTransient(err)) return `GCS bucket "${bucket}" could not be reached: ${msg}`;
  return `GCS bucket "${bucket}" cannot be used: ${msg}`;
}
