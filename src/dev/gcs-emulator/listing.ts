import { badRequest } from './errors.js';
import { compareNames } from './name-index.js';
import type { StoredBucket, StoredObject } from './store.js';

export interface ListParams {
  prefix: string;
  delimiter: string;
  maxResults: number;
  pageToken?: string;
  includeTrailingDelimiter: boolean;
  startOffset?: string;
  endOffset?: string;
}

export interface ListPage {
  items: StoredObject[];
  prefixes: string[];
  nextPageToken?: string;
}

/*
 * Page tokens are opaque to clients. Ours records where the previous page stopped: the last
 * name consumed, and, when the page ended on a prefix, that prefix (every name under it was
 * already summarized by it and must be skipped).
 */
interface Cursor {
  after: string;
  skipPrefix?: string;
}

function encodeToken(c: Cursor): string {
  return Buffer.from(JSON.stringify(c)).toString('base64url');
}

function decodeToken(t: string): Cursor {
  try {
    const c = JSON.parse(Buffer.from(t, 'base64url').toString()) as Cursor;
    if (typeof c.after !== 'string') throw new Error('bad');
    return c;
  } catch {
    throw badRequest('Invalid page token.');
  }
}

/**
 * objects.list as documented: entries are objects (items) and, with a delimiter, the distinct
 * "directory" prefixes of names that contain the delimiter after `prefix`. `maxResults` bounds
 * items + prefixes together (at most 1000); `includeTrailingDelimiter` also returns, as items,
 * objects whose name ends at such a prefix (the `dir/` placeholders). `startOffset` is
 * inclusive, `endOffset` exclusive.
 */
export function listObjects(bucket: StoredBucket, p: ListParams): ListPage {
  const index = bucket.index;
  const cursor = p.pageToken ? decodeToken(p.pageToken) : undefined;
  const items: StoredObject[] = [];
  const prefixes: string[] = [];
  let lastName: string | undefined;
  let lastPrefix: string | undefined;
  let full = false;

  // Start at the first candidate: the prefix, the start offset, or just past the cursor.
  let i = index.lowerBound(p.prefix);
  if (p.startOffset !== undefined) i = Math.max(i, index.lowerBound(p.startOffset));
  if (cursor) {
    i = Math.max(i, index.lowerBound(cursor.after));
    if (index.at(i) === cursor.after) i++;
    if (cursor.skipPrefix) i = Math.max(i, index.pastPrefix(cursor.skipPrefix));
  }
  while (i < index.size) {
    const name = index.at(i) as string;
    if (!name.startsWith(p.prefix)) break;
    if (p.endOffset !== undefined && compareNames(name, p.endOffset) >= 0) break;
    let entryPrefix: string | undefined;
    if (p.delimiter) {
      const rest = name.slice(p.prefix.length);
      const d = rest.indexOf(p.delimiter);
      if (d >= 0) entryPrefix = p.prefix + rest.slice(0, d + p.delimiter.length);
    }
    if (full) {
      // There is at least one more entry: the page is truncated here.
      return { items, prefixes, nextPageToken: encodeToken({ after: lastName as string, ...(lastPrefix ? { skipPrefix: lastPrefix } : {}) }) };
    }
    if (entryPrefix !== undefined) {
      prefixes.push(entryPrefix);
      // With includeTrailingDelimiter the object named exactly like the prefix (it sorts first
      // under it) is returned as an item too.
      if (p.includeTrailingDelimiter && name === entryPrefix) items.push(bucket.objects.get(name) as StoredObject);
      lastPrefix = entryPrefix;
      lastName = name;
      // Everything else under this prefix is summarized by it: jump past it.
      i = index.pastPrefix(entryPrefix);
    } else {
      items.push(bucket.objects.get(name) as StoredObject);
      lastPrefix = undefined;
      lastName = name;
      i++;
    }
    if (items.length + prefixes.length >= p.maxResults) full = true;
  }
  return { items, prefixes };
}
