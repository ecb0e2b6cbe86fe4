import type { History } from './history.js';
import type { TagRecord } from './record.js';

/** A tag request the journal refuses (a name already taken): a sentence for the person, exit 2. */
export class TagError extends Error {}

export interface TagRequest {
  name: string;
  /** the tag stands for this session's mutations after the point */
  session?: string;
  actor: string;
}

/**
 * The tag record for `req` at the journal's current point (`lastSeq`), or the refusal: tag names
 * are unique in a journal, since `--to NAME` must mean one point.
 */
export function makeTag(h: History, req: TagRequest, lastSeq: number, now = Date.now()): TagRecord {
  const taken = h.tags.get(req.name);
  if (taken) {
    throw new TagError(
      `tag ${req.name} already marks #${taken.at} (made ${new Date(taken.time).toISOString()}${taken.session !== undefined ? `, session ${taken.session}` : ''}); tag names are unique in a journal: choose another name`,
    );
  }
  return { kind: 'tag', time: now, name: req.name, at: lastSeq, actor: req.actor, ...(req.session !== undefined ? { session: req.session } : {}) };
}
