import { execFileSync } from 'node:child_process';
import path from 'node:path';

/** Mounted tests run the real CLI (bin/ledgerfs.js -> dist/), so compile once before them. */
export default function setup(): void {
  const root = path.resolve(import.meta.dirname, '../..');
  execFileSync(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], {
    cwd: root,
    stdio: 'inherit',
  });
}
