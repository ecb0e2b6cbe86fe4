import { describe, expect, it } from 'vitest';
import { parseMultipart } from '../../src/dev/gcs-emulator/multipart.js';

// The emulator's multipart/related parser, on bodies as the clients that upload to GCS write them.
const json = '{"name":"v.txt"}';

describe('parseMultipart', () => {
  it('a media part with headers (the Node client), binary-safe', () => {
    const data = Buffer.from([0x0d, 0x0a, 0x2d, 0x2d, 0x00, 0xff, 0x0d, 0x0a]); // CRLF "--" in the bytes
    const body = Buffer.concat([
      Buffer.from(`--b1\r\nContent-Type: application/json\r\n\r\n${json}\r\n--b1\r\nContent-Type: application/octet-stream\r\n\r\n`),
      data,
      Buffer.from('\r\n--b1--\r\n'),
    ]);
    const parts = parseMultipart(body, 'multipart/related; boundary=b1');
    expect(parts.map((p) => p.headers['content-type'])).toEqual(['application/json', 'application/octet-stream']);
    expect(parts[0]?.body.toString()).toBe(json);
    expect(parts[1]?.body).toEqual(data);
  });

  it('a media part without headers (Go\'s client: rclone, gcloud) is its bytes, not the empty line before them', () => {
    const body = Buffer.from(`--3a14\r\nContent-Type: application/json\r\n\r\n${json}\n\r\n--3a14\r\n\r\nHELLO\r\n--3a14--\r\n`);
    const parts = parseMultipart(body, 'multipart/related; boundary=3a14');
    expect(parts[0]?.body.toString()).toBe(`${json}\n`);
    expect(parts[1]?.headers).toEqual({});
    expect(parts[1]?.body.toString()).toBe('HELLO'); // was "\r\nHELLO": rclone saw 7 bytes for 5 and failed every upload
    const empty = parseMultipart(Buffer.from(`--q\r\n\r\n${json}\r\n--q\r\n\r\n\r\n--q--`), 'multipart/related; boundary="q"');
    expect(empty.map((p) => p.body.toString())).toEqual([json, '']);
  });
});
