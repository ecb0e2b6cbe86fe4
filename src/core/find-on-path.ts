import fs from 'node:fs';
import path from 'node:path';

/**
 * The first executable `name` in the directories of `PATH` (colon-separated), or undefined.
 * Relative entries (an empty one means the working directory) are skipped: a program this
 * daemon starts as root must not be whatever sits in the directory it happens to run in.
 */
export function findOnPath(name: string, PATH: string = process.env.PATH ?? ''): string | undefined {
  for (const dir of PATH.split(path.delimiter)) {
    if (!path.isAbsolute(dir)) continue;
    const p = path.join(dir, name);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      /* not here */
    }
  }
  return undefined;
}
