import fs from 'node:fs';
import path from 'node:path';

/**
 * A small workspace for first contact: two case folders, a tools folder and a secret, so the
 * demo policy (below) has something to show, hide and refuse.
 */
export function ensureDemoWorkspace(dir: string): { created: boolean } {
  if (fs.existsSync(dir) && fs.readdirSync(dir).length > 0) return { created: false };
  const files: Record<string, string> = {
    'README.txt': 'This is a ledgerfs demo workspace. Everything you change here goes through ledgerfs.\n',
    'projects/Wilson-MVA/notes.md': '# Wilson MVA\n\n- intake call done\n- request police report\n',
    'projects/Wilson-MVA/timeline.txt': '2026-03-02 accident\n2026-03-05 first visit\n',
    'projects/Wilson-MVA/.env': 'CLIENT_PORTAL_TOKEN=demo-secret-never-shown\n',
    'projects/Garcia-Estate/inventory.txt': 'a case the demo policy does not expose\n',
    'Tools/summarize.py': '#!/usr/bin/env python3\nimport sys\nprint(sum(1 for _ in open(sys.argv[1])), "lines")\n',
  };
  for (const [rel, body] of Object.entries(files)) {
    const p = path.join(dir, rel);
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, body, { mode: rel.endsWith('.py') ? 0o755 : 0o644 });
  }
  return { created: true };
}

/** The demo's policy file, beside its workspace (so `ledgerfs log` without flags finds its journal). */
function demoPolicyFile(workspaceDir: string): string {
  return path.join(path.dirname(workspaceDir), 'demo-policy.yaml');
}

/**
 * The policy `ledgerfs mount` uses when given no workspace: one case folder read-write with
 * limits, the tools read-only, credentials hidden, another case not exposed at all. Written
 * once; a user's edits to it are kept.
 */
export function ensureDemoPolicy(workspaceDir: string): string {
  const file = demoPolicyFile(workspaceDir);
  if (fs.existsSync(file)) return file;
  fs.writeFileSync(
    file,
    `# The ledgerfs demo policy (edit it, then remount). Every field: ledgerfs policy check --help
preset: sandboxed                   # credentials hidden, roots read-only unless mode: rw
backend: { type: local, path: ${JSON.stringify(workspaceDir)} }
roots:
  - path: /projects/Wilson-MVA       # the case the program works on
    mode: rw
    quota: { bytes: 50MiB, files: 1000 }
    maxFileBytes: 20MiB
    suffixes: [.md, .txt, .json, .pdf, .docx]
  - path: /Tools                     # visible, never writable
    mode: ro
# not listed, so not there at all: /projects/Garcia-Estate, /README.txt
`,
  );
  return file;
}

/** What a newcomer can try on the demo mount, printed once it is up. */
/** What to try, with `cli` the way to run this CLI here (see self.ts). */
export function demoHints(mnt: string, session: string | null, cli: string): string {
  const caseDir = `${mnt}/projects/Wilson-MVA`;
  const journal = session
    ? `  then:  ${cli} log            (every change, newest first)\n` +
      `         ${cli} diff --session ${session}\n` +
      `         ${cli} rollback --session ${session}   (undo all of it, on the live mount)\n`
    : '';
  return (
    `  try:   ls -la ${mnt} ${caseDir}     (the .env and the other case are not there)\n` +
    `         echo "- called the insurer" >> ${caseDir}/notes.md\n` +
    `         echo x > ${mnt}/Tools/x      (refused: read-only file system)\n` +
    `         cat ${mnt}/.ledgerfs/denials ${mnt}/.ledgerfs/usage ${mnt}/.ledgerfs/policy\n` +
    journal
  );
}
