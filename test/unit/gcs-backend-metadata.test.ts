import { describe, expect, it } from 'vitest';
import { isTransient, httpStatus, setupErrorMessage } from '../../src/backend/gcs/errors.js';
import { formatRfc3339Ns, inodeNumber, nodeMetaEntries, parseRfc3339Ns, readNodeMeta } from '../../src/backend/gcs/metadata.js';
import { isPosixName } from '../../src/backend/gcs/names.js';
import { normalizePrefix } from '../../src/config/gcs-url.js';
import { resolveGcsOptions } from '../../src/backend/gcs/options.js';

// Pure helpers of the GCS backend: metadata formats, names, options, error classification.

describe('gcsfuse_mtime (RFC 3339, nanoseconds)', () => {
  it('formats like Go time.RFC3339Nano in UTC: trailing zeros dropped', () => {
    expect(formatRfc3339Ns(1_700_000_000_987_654_321n)).toBe('2023-11-14T22:13:20.987654321Z');
    expect(formatRfc3339Ns(1_700_000_000_500_000_000n)).toBe('2023-11-14T22:13:20.5Z');
    expect(formatRfc3339Ns(1_700_000_000_000_000_000n)).toBe('2023-11-14T22:13:20Z');
    expect(formatRfc3339Ns(-1n)).toBe('1969-12-31T23:59:59.999999999Z');
  });

  it('parses any offset and precision, and round-trips', () => {
    for (const ns of [0n, 1n, 1_700_000_000_987_654_321n, -1_000_000_001n]) expect(parseRfc3339Ns(formatRfc3339Ns(ns))).toBe(ns);
    expect(parseRfc3339Ns('2023-11-14T23:13:20.1+01:00')).toBe(1_700_000_000_100_000_000n);
    expect(parseRfc3339Ns('2023-11-14t22:13:20z')).toBe(1_700_000_000_000_000_000n);
    expect(parseRfc3339Ns('yesterday')).toBeUndefined();
  });
});

describe('POSIX metadata keys', () => {
  it('writes gsutil-compatible mode/uid/gid and reads them back', () => {
    const m = nodeMetaEntries({ perm: 0o644, uid: 0, gid: 100, mtimeNs: 1_000_000_001n, atimeNs: 2_500_000_000n, symlinkTarget: 't' });
    expect(m).toEqual({
      'goog-reserved-posix-mode': '644',
      'goog-reserved-posix-uid': '0',
      'goog-reserved-posix-gid': '100',
      gcsfuse_mtime: '1970-01-01T00:00:01.000000001Z',
      'goog-reserved-file-atime': '2',
      ledgerfs_atime: '1970-01-01T00:00:02.5Z',
      gcsfuse_symlink_target: 't',
    });
    expect(readNodeMeta(m)).toEqual({ perm: 0o644, uid: 0, gid: 100, mtimeNs: 1_000_000_001n, atimeNs: 2_500_000_000n, symlinkTarget: 't' });
    expect(nodeMetaEntries({ perm: 0o007 })['goog-reserved-posix-mode']).toBe('007');
    expect(nodeMetaEntries({ perm: 0o1777 })['goog-reserved-posix-mode']).toBe('1777');
  });

  it("keeps atime's nanoseconds, unless another tool set gsutil's whole-second key since", () => {
    const m = nodeMetaEntries({ atimeNs: -1_999_999_999n });
    expect(m).toEqual({ 'goog-reserved-file-atime': '-2', ledgerfs_atime: '1969-12-31T23:59:58.000000001Z' });
    expect(readNodeMeta(m).atimeNs).toBe(-1_999_999_999n);
    expect(readNodeMeta({ ...m, 'goog-reserved-file-atime': '7' }).atimeNs).toBe(7_000_000_000n);
  });

  it('ignores malformed values instead of guessing', () => {
    expect(readNodeMeta({ 'goog-reserved-posix-mode': 'rwxr-xr-x', 'goog-reserved-posix-uid': '-1', gcsfuse_mtime: 'soon' })).toEqual({});
  });

  it('an owner id past 32 bits (another tool wrote it) is not read wrapped: the default applies', () => {
    const n = readNodeMeta({ 'goog-reserved-posix-uid': '4294967296', 'goog-reserved-posix-gid': '99999999999' });
    expect([n.uid, n.gid]).toEqual([undefined, undefined]);
    expect(readNodeMeta({ 'goog-reserved-posix-uid': '4294967294' }).uid).toBe(4294967294);
  });

  it('inode numbers are stable per path and fit a JS number', () => {
    expect(inodeNumber('/')).toBe(1);
    expect(inodeNumber('/a/b')).toBe(inodeNumber('/a/b'));
    expect(inodeNumber('/a/b')).not.toBe(inodeNumber('/a/c'));
    expect(Number.isSafeInteger(inodeNumber('/x'.repeat(100)))).toBe(true);
  });
});

describe('names and options', () => {
  it('POSIX-showable name components', () => {
    for (const ok of ['a', 'a b', '...', 'é', 'x'.repeat(255)]) expect(isPosixName(ok)).toBe(true);
    for (const bad of ['', '.', '..', 'a/b', 'a\0b', 'x'.repeat(256), 'é'.repeat(128)]) expect(isPosixName(bad)).toBe(false);
  });

  it('prefixes are normalized to "" or "a/b/"', () => {
    expect(normalizePrefix('')).toBe('');
    expect(normalizePrefix('/')).toBe('');
    expect(normalizePrefix('/team//ws/')).toBe('team/ws/');
    expect(() => normalizePrefix('a/../b')).toThrow(/may not contain/);
  });

  it('options take defaults and reject chunk sizes GCS would refuse', () => {
    const o = resolveGcsOptions({ bucket: 'b' });
    expect(o.implicitDirs).toBe(true);
    expect(o.prefix).toBe('');
    expect(() => resolveGcsOptions({ bucket: 'b', uploadChunkBytes: 1000 })).toThrow(/multiple of 256 KiB/);
  });
});

describe('error classification', () => {
  it('reads the status from each error shape the client produces', () => {
    expect(httpStatus({ code: 503 })).toBe(503);
    expect(httpStatus({ status: 412, response: { status: 412 } })).toBe(412);
    expect(httpStatus(new Error('Retry limit exceeded - status: 502 - {}'))).toBe(502);
    expect(httpStatus({ code: 'ECONNRESET' })).toBeUndefined();
  });

  it('transient: 408, 429, 5xx and connection failures; not 4xx', () => {
    for (const e of [{ code: 429 }, { code: 500 }, { code: 'ECONNREFUSED' }, { code: 'ECONNRESET' }, { type: 'request-timeout', message: 'network timeout at: x' }, new Error('socket hang up')]) {
      expect(isTransient(e)).toBe(true);
    }
    for (const e of [{ code: 404 }, { code: 412 }, { code: 403 }, new Error('Could not load the default credentials')]) expect(isTransient(e)).toBe(false);
  });

  it('setup errors tell how to provide credentials', () => {
    const adc = setupErrorMessage(new Error('Could not load the default credentials. Browse to https://cloud.google.com/docs/authentication/getting-started for more information.'), 'bkt', undefined);
    expect(adc).toMatch(/^no usable Google Cloud credentials for bucket "bkt": provide Application Default Credentials \(set GOOGLE_APPLICATION_CREDENTIALS/);
    expect(setupErrorMessage({ code: 403, message: 'denied' }, 'bkt', undefined)).toMatch(/access to GCS bucket "bkt" was refused/);
  });
});
