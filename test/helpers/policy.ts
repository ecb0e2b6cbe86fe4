import { constants as C } from 'node:fs';
import fs from 'node:fs';
import path from 'node:path';
import { openWorkspace, type OpenedWorkspace, type PolicyRuntime } from '../../src/app/workspace.js';
import { countRoot, type Usage } from '../../src/policy/usage.js';
import type { Caller } from '../../src/core/mutation.js';
import { MutationPipeline } from '../../src/vfs/pipeline.js';
import { Vfs } from '../../src/vfs/vfs.js';
import { makeTemp, rmTemp } from './tmp.js';

/** A policy workspace on a temp directory, driven through the core (no mount). */
export interface PolicyFixture {
  dir: string;
  /** the backend directory (the file's `backend.path`) */
  src: string;
  file: string;
  ws: OpenedWorkspace;
  policy: PolicyRuntime;
  vfs: Vfs;
  /** usage the stage keeps for root i */
  usage(i: number): Usage;
  /** a fresh count of root i in the backend */
  recount(i: number): Promise<Usage>;
  /** create (O_CREAT|O_TRUNC), write, close */
  writeFile(p: string, data: string | Buffer, caller?: Caller): Promise<void>;
  readFile(p: string): Promise<string>;
  close(): Promise<void>;
}

/** `body` is the mount file without its backend line (added: the temp dir's src/). */
export async function policyFixture(body: string, populate?: (src: string) => void): Promise<PolicyFixture> {
  const dir = makeTemp('policy');
  const src = path.join(dir, 'src');
  fs.mkdirSync(src);
  populate?.(src);
  const file = path.join(dir, 'policy.yaml');
  fs.writeFileSync(file, `backend: { type: local, path: ./src }\n${body}`);
  let ws: OpenedWorkspace;
  try {
    ws = await openWorkspace({ policy: file });
  } catch (err) {
    rmTemp(dir);
    throw err;
  }
  const vfs = new Vfs(ws.backend, { pipeline: new MutationPipeline(ws.stages) });
  const policy = ws.policy as PolicyRuntime;
  const root = (i: number) => policy.compiled.roots[i] as (typeof policy.compiled.roots)[number];
  return {
    dir, src, file, ws, policy, vfs,
    usage: (i) => ({ ...(policy.usage.of(root(i)) as Usage) }),
    recount: async (i) => (await countRoot(root(i), ws.store)).visible,
    async writeFile(p, data, caller) {
      const buf = Buffer.from(data);
      const fh = await vfs.create(p, 0o644, C.O_WRONLY | C.O_CREAT | C.O_TRUNC, caller);
      try {
        if (buf.length) await vfs.write(fh, buf, buf.length, 0, caller);
      } finally {
        await vfs.release(fh, caller);
      }
    },
    async readFile(p) {
      const fh = await vfs.open(p, C.O_RDONLY);
      try {
        const chunks: Buffer[] = [];
        for (let pos = 0; ; ) {
          const buf = Buffer.alloc(65536);
          const n = await vfs.read(fh, buf, buf.length, pos);
          if (n === 0) break;
          chunks.push(buf.subarray(0, n));
          pos += n;
        }
        return Buffer.concat(chunks).toString();
      } finally {
        await vfs.release(fh);
      }
    },
    async close() {
      await vfs.closeAll();
      rmTemp(dir);
    },
  };
}

/** Put files (and their directories) into a backend directory: {'a/b.txt': 'text'}. */
export function putFiles(src: string, files: Record<string, string>): void {
  for (const [rel, body] of Object.entries(files)) {
    const p = path.join(src, rel);
    fs.mkdirSync(rel.endsWith('/') ? p : path.dirname(p), { recursive: true });
    if (!rel.endsWith('/')) fs.writeFileSync(p, body);
  }
}

export const CASE_POLICY = `
roots:
  - path: /projects/Wilson-MVA
    mode: rw
    quota: { bytes: 1000, files: 10 }
    maxFileBytes: 400
    suffixes: [.pdf, .md, .txt, .docx, .json]
    readonly: ["intake/**"]
  - path: /Tools
    mode: ro
  - path: /scratch
    source: /tmp-area
    mode: rw
hide: ["**/.env", "**/*.pem"]
`;

export const CASE_FILES: Record<string, string> = {
  'projects/Wilson-MVA/notes.md': 'notes\n',
  'projects/Wilson-MVA/.env': 'SECRET=1\n',
  'projects/Wilson-MVA/intake/form.pdf': 'PDF',
  'projects/Other-Case/secret.md': 'other client\n',
  'Tools/build.py': 'print(1)\n',
  'Tools/key.pem': 'KEY',
  'tmp-area/': '',
  'unexposed.txt': 'not in any root\n',
};
