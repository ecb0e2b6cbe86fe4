import { createHash } from 'node:crypto';

/*
 * GCS reports object checksums as base64 of the big-endian CRC32C (Castagnoli) and of the MD5
 * digest. The emulator computes its own rather than borrowing the client's implementation, so a
 * conformance test that passes means the two sides agree independently.
 */

const CRC32C_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

export function crc32c(data: Uint8Array, seed = 0): number {
  let c = ~seed >>> 0;
  for (let i = 0; i < data.length; i++) c = (CRC32C_TABLE[(c ^ data[i]!) & 0xff]! ^ (c >>> 8)) >>> 0;
  return ~c >>> 0;
}

export function crc32cBase64(data: Uint8Array): string {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(crc32c(data));
  return b.toString('base64');
}

/** OpenSSL takes at most 2 GiB per update ("data is too long"): objects above that go in slices. */
const MD5_SLICE = 1 << 30;

export function md5Base64(data: Uint8Array): string {
  const h = createHash('md5');
  for (let off = 0; off < data.length; off += MD5_SLICE) h.update(data.subarray(off, off + MD5_SLICE));
  if (data.length === 0) h.update(data);
  return h.digest('base64');
}
