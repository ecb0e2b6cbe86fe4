import fs from 'node:fs';
import path from 'node:path';

const FIX = 'Name a writable one: --state DIR (or set XDG_STATE_HOME).';

/**
 * Why the journal's state directory cannot be made or written here, as a sentence, or null.
 * Asked before anything is created (access(2) answers EROFS on a read-only file system, and
 * EACCES for a user who may not write there), so a refused mount leaves nothing behind.
 */
export function stateDirProblem(dir: string): string | null {
  let p = path.resolve(dir);
  while (!fs.existsSync(p) && path.dirname(p) !== p) p = path.dirname(p);
  const own = p === path.resolve(dir);
  if (own && !fs.statSync(p).isDirectory()) return `the journal's state directory ${dir} is not a directory. ${FIX}`;
  try {
    fs.accessSync(p, fs.constants.W_OK | fs.constants.X_OK);
    return null;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const where = own ? `${dir}` : `${dir} (it would be made in ${p})`;
    if (code === 'EROFS') return `the journal's state directory ${where} is on a read-only file system. ${FIX}`;
    if (code === 'EACCES' || code === 'EPERM') {
      const home = !own && process.env.HOME && dir.startsWith(process.env.HOME + path.sep) && !fs.existsSync(process.env.HOME)
        ? ` (this user's home, ${process.env.HOME}, does not exist)`
        : '';
      return `the journal's state directory ${where} cannot be ${own ? 'written' : 'created'} by this user${home}. ${FIX}`;
    }
    return `the journal's state directory ${where} is not usable: ${(err as Error).message}. ${FIX}`;
  }
}
