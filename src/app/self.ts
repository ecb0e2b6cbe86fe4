import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** This CLI's entry script (what a child daemon is started with). */
export const CLI_SCRIPT = fileURLToPath(new URL('../../bin/ledgerfs.js', import.meta.url));

/** How to run this CLI from a shell here: `ledgerfs` when it is on the PATH, else `node .../bin/ledgerfs.js`. */
export function cliCommand(): string {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && fs.existsSync(path.join(dir, 'ledgerfs'))) return 'ledgerfs';
  }
  return `node ${CLI_SCRIPT}`;
}
