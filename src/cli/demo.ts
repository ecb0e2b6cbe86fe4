import fs from 'node:fs';
import path from 'node:path';

/** A small workspace for first contact: a case folder and a tools folder, with real files. */
export function ensureDemoWorkspace(dir: string): { created: boolean } {
  if (fs.existsSync(dir) && fs.readdirSync(dir).length > 0) return { created: false };
  const files: Record<string, string> = {
    'README.txt': 'This is a ledgerfs demo workspace. Everything you change here goes through ledgerfs.\n',
    'projects/Wilson-MVA/notes.md': '# Wilson MVA\n\n- intake call done\n- request police report\n',
    'projects/Wilson-MVA/timeline.txt': '2026-03-02 accident\n2026-03-05 first visit\n',
    'Tools/summarize.py': '#!/usr/bin/env python3\nimport sys\nprint(sum(1 for _ in open(sys.argv[1])), "lines")\n',
  };
  for (const [rel, body] of Object.entries(files)) {
    const p = path.join(dir, rel);
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, body, { mode: rel.endsWith('.py') ? 0o755 : 0o644 });
  }
  return { created: true };
}
