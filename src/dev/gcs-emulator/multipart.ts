import { badRequest } from './errors.js';

export interface Part {
  headers: Record<string, string>;
  body: Buffer;
}

/**
 * Parse a multipart/related body (RFC 2387) as the multipart upload sends it: a JSON metadata
 * part, then the media part. Parts are delimited by CRLF "--boundary"; the body of a part ends
 * right before the CRLF that precedes the next delimiter. Binary-safe: works on Buffers.
 */
export function parseMultipart(body: Buffer, contentType: string): Part[] {
  const m = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  if (!m) throw badRequest('Missing multipart boundary');
  const boundary = m[1] ?? m[2];
  const delim = Buffer.from(`--${boundary}`);
  const parts: Part[] = [];
  let pos = body.indexOf(delim);
  if (pos < 0) throw badRequest('Malformed multipart body');
  for (;;) {
    pos += delim.length;
    if (body.subarray(pos, pos + 2).toString() === '--') break; // closing delimiter
    if (body.subarray(pos, pos + 2).toString() === '\r\n') pos += 2;
    const next = body.indexOf(Buffer.concat([Buffer.from('\r\n'), delim]), pos);
    if (next < 0) throw badRequest('Malformed multipart body: missing closing boundary');
    const raw = body.subarray(pos, next);
    // a part without headers (Go's client sends the media so) starts with the empty line itself
    const sep = raw.subarray(0, 2).toString() === '\r\n' ? -2 : raw.indexOf('\r\n\r\n');
    const headText = sep < 0 ? '' : raw.subarray(0, sep).toString('utf8');
    const headers: Record<string, string> = {};
    for (const line of headText.split('\r\n')) {
      const i = line.indexOf(':');
      if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
    }
    parts.push({ headers, body: sep === -1 ? raw : raw.subarray(sep + 4) });
    pos = next + 2;
  }
  return parts;
}
