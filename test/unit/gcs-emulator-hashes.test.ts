import { describe, expect, it } from 'vitest';
import { md5Base64 } from '../../src/dev/gcs-emulator/hashes.js';

describe('emulator checksums', () => {
  // One crypto hash update takes at most 2^31-1 bytes: an object of 2 GiB or more answered 500
  // ("data is too long") and a mount's upload of it failed (issue 19).
  it('the MD5 of an object over 2 GiB', () => {
    const big = Buffer.alloc(2 ** 31 + 1);
    // `head -c 2147483649 /dev/zero | openssl md5 -binary | base64`
    expect(md5Base64(big)).toBe('l83Uu0XD1dZSwAeZAftO7A==');
  }, 60_000);

  it('the MD5 of a small object is unchanged by the slicing', () => {
    // `printf abc | openssl md5 -binary | base64`
    expect(md5Base64(Buffer.from('abc'))).toBe('kAFQmDzST7DWlj99KOF/cg==');
  });
});
