import { createHash } from 'node:crypto';
import { constants as C } from 'node:fs';
import fs from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { CompiledRoot } from '../../src/policy/compile.js';
import { VfsError } from '../../src/core/errors.js';
import { isWithin } from '../../src/core/paths.js';
import type { Caller } from '../../src/vfs/pipeline.js';
import { policyFixture, putFiles, type PolicyFixture } from '../helpers/policy.js';

/*
 * Random operations under a random policy, through the core (Vfs over PolicyView + PolicyStage
 * over a real directory). After every operation:
 *  1. usage of every counted root equals a fresh recount of the backend (hidden names apart);
 *  2. the backend changed only in ways the policy allows (see `forbidden` below); a directory
 *     kept aside for its hidden names (rmdir, rename over it, brought back by mkdir) is a move
 *     that keeps every hidden node whole.
 * A refused operation must leave the backend exactly as it was.
 */

// ---- the random policy ---------------------------------------------------------------------

const CANDIDATES = [
  { key: 'a', source: '/a', views: ['/a', '/view/a'] },
  { key: 'b', source: '/b', views: ['/b'] },
  { key: 'cd', source: '/c/d', views: ['/c/d'] },
];

const rootArb = fc.record({
  mode: fc.constantFrom('ro', 'rw', 'rw', 'rw'),
  bytes: fc.option(fc.integer({ min: 40, max: 1500 }), { nil: undefined }),
  files: fc.option(fc.integer({ min: 6, max: 25 }), { nil: undefined }),
  max: fc.option(fc.integer({ min: 20, max: 300 }), { nil: undefined }),
  suffixes: fc.option(fc.constant(['.txt', '.md']), { nil: undefined }),
  readonly: fc.option(fc.constantFrom(['keep/**'], ['*.md'], ['keep']), { nil: undefined }),
  hide: fc.option(fc.constantFrom(['secret'], ['sub/*.sh']), { nil: undefined }),
  view: fc.nat(1),
});

const policyArb = fc.record({
  roots: fc.tuple(rootArb, rootArb, rootArb),
  use: fc.subarray([0, 1, 2], { minLength: 1 }),
  hide: fc.option(fc.constantFrom(['**/.env'], ['**/.env', '*.pem']), { nil: undefined }),
});

type PolicySpec = typeof policyArb extends fc.Arbitrary<infer T> ? T : never;

function policyYaml(p: PolicySpec): string {
  const lines = ['roots:'];
  for (const i of p.use) {
    const c = CANDIDATES[i] as (typeof CANDIDATES)[number];
    const r = p.roots[i] as (typeof p.roots)[number];
    const view = c.views[r.view % c.views.length] as string;
    lines.push(`  - path: ${view}`, `    source: ${c.source}`, `    mode: ${r.mode}`);
    const q = [r.bytes !== undefined ? `bytes: ${r.bytes}` : '', r.files !== undefined ? `files: ${r.files}` : ''].filter(Boolean);
    if (q.length) lines.push(`    quota: { ${q.join(', ')} }`);
    if (r.max !== undefined) lines.push(`    maxFileBytes: ${r.max}`);
    if (r.suffixes) lines.push(`    suffixes: [${r.suffixes.join(', ')}]`);
    if (r.readonly) lines.push(`    readonly: ${JSON.stringify(r.readonly)}`);
    if (r.hide) lines.push(`    hide: ${JSON.stringify(r.hide)}`);
  }
  if (p.hide) lines.push(`hide: ${JSON.stringify(p.hide)}`);
  return lines.join('\n') + '\n';
}

const INITIAL: Record<string, string> = {};
for (const c of CANDIDATES) {
  const s = c.source.slice(1);
  Object.assign(INITIAL, {
    [`${s}/x.txt`]: 'x'.repeat(20),
    [`${s}/.env`]: 'SECRET=1',
    [`${s}/k.pem`]: 'KEY',
    [`${s}/keep/a.md`]: 'keep me',
    [`${s}/sub/z.sh`]: 'echo',
    [`${s}/secret/s.txt`]: 'hush',
  });
}
INITIAL['outside/o.txt'] = 'not in any root';

// ---- random operations on view paths -------------------------------------------------------

/** mostly ordinary names; some that rules look at (suffix, hide, readonly) */
const nameArb = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('x.txt', 'y.md', 'n.txt', 'new', 'sub') },
  { weight: 1, arbitrary: fc.constantFrom('z.sh', '.env', 'k.pem', 'keep', 'secret', 'a.md') },
);
const JUNK_DIRS = ['/', '/view', '/c', '/.ledgerfs', '/outside', '/nowhere', ...CANDIDATES.flatMap((c) => c.views)];

/** The roots' view paths under this policy. */
function viewRoots(p: PolicySpec): string[] {
  return p.use.map((i) => {
    const c = CANDIDATES[i] as (typeof CANDIDATES)[number];
    return c.views[(p.roots[i] as { view: number }).view % c.views.length] as string;
  });
}

/** Operations whose paths mostly land in the policy's roots, some anywhere. */
function opsArb(p: PolicySpec) {
  const dirs = viewRoots(p).flatMap((v) => [v, v, `${v}/sub`, `${v}/keep`, `${v}/secret`, `${v}/new`]);
  const dirArb = fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...dirs) }, { weight: 1, arbitrary: fc.constantFrom(...JUNK_DIRS) });
  const pathArb = fc.tuple(dirArb, nameArb).map(([d, n]) => (d === '/' ? `/${n}` : `${d}/${n}`));
  const anyPathArb = fc.oneof(pathArb, dirArb.filter((d) => d !== '/'));
  return fc.array(opArb(pathArb, anyPathArb), { minLength: 1, maxLength: 40, size: 'max' });
}

const opArb = (pathArb: fc.Arbitrary<string>, anyPathArb: fc.Arbitrary<string>) => fc.oneof(
  fc.record({ op: fc.constant('write' as const), path: pathArb, size: fc.integer({ min: 0, max: 350 }) }),
  fc.record({ op: fc.constant('pwrite' as const), path: pathArb, offset: fc.integer({ min: 0, max: 300 }), size: fc.integer({ min: 1, max: 200 }) }),
  fc.record({ op: fc.constant('truncate' as const), path: pathArb, size: fc.integer({ min: 0, max: 400 }) }),
  fc.record({ op: fc.constant('unlink' as const), path: pathArb }),
  fc.record({ op: fc.constant('mkdir' as const), path: anyPathArb }),
  fc.record({ op: fc.constant('rmdir' as const), path: anyPathArb }),
  fc.record({ op: fc.constant('rename' as const), path: anyPathArb, to: anyPathArb }),
  fc.record({ op: fc.constant('link' as const), path: pathArb, to: pathArb }),
  fc.record({ op: fc.constant('symlink' as const), path: pathArb, target: fc.constantFrom('x.txt', '../keep/a.md', 'a-long-target-name.txt'.repeat(3)) }),
  fc.record({ op: fc.constant('chmod' as const), path: anyPathArb }),
  fc.record({ op: fc.constant('orphan' as const), path: pathArb, size: fc.integer({ min: 1, max: 200 }) }),
  fc.record({ op: fc.constant('operator' as const), path: pathArb, size: fc.integer({ min: 0, max: 100 }) }),
);
type Op = ReturnType<typeof opArb> extends fc.Arbitrary<infer T> ? T : never;

const OPERATOR: Caller = { operator: true };

async function apply(fx: PolicyFixture, o: Op): Promise<void> {
  const v = fx.vfs;
  const data = (n: number) => Buffer.alloc(n, 0x61 + (n % 26));
  switch (o.op) {
    case 'write':
      return fx.writeFile(o.path, data(o.size));
    case 'pwrite': {
      const fh = await v.open(o.path, C.O_RDWR);
      try {
        await v.write(fh, data(o.size), o.size, o.offset);
      } finally {
        await v.release(fh);
      }
      return;
    }
    case 'truncate':
      return v.truncate(o.path, o.size);
    case 'unlink':
      return v.unlink(o.path);
    case 'mkdir':
      return v.mkdir(o.path, 0o755);
    case 'rmdir':
      return v.rmdir(o.path);
    case 'rename':
      return v.rename(o.path, o.to);
    case 'link':
      return v.link(o.path, o.to);
    case 'symlink':
      return v.symlink(o.target, o.path);
    case 'chmod':
      return v.chmod(o.path, 0o600);
    case 'orphan': {
      // a temp-file pattern: open, unlink, keep writing, close
      const fh = await v.open(o.path, C.O_RDWR);
      try {
        await v.unlink(o.path);
        await v.write(fh, data(o.size), o.size, 0);
      } finally {
        await v.release(fh);
      }
      return;
    }
    case 'operator':
      return fx.writeFile(o.path, data(o.size), OPERATOR);
  }
}

// ---- the backend as a set of nodes, and what may change ------------------------------------

interface Node {
  type: 'file' | 'dir' | 'symlink';
  size: number;
  mode: number;
  ino: number;
  content: string;
}

function snapshot(src: string): Map<string, Node> {
  const out = new Map<string, Node>();
  const walk = (rel: string) => {
    for (const name of fs.readdirSync(path.join(src, rel))) {
      const r = `${rel}/${name}`;
      const p = path.join(src, r);
      const st = fs.lstatSync(p);
      const type = st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'symlink' : 'file';
      const content = type === 'file' ? createHash('sha1').update(fs.readFileSync(p)).digest('hex') : type === 'symlink' ? fs.readlinkSync(p) : '';
      out.set(r, { type, size: st.size, mode: st.mode & 0o7777, ino: st.ino, content });
      if (type === 'dir') walk(r);
    }
  };
  walk('');
  return out;
}

/** Every way the change from `before` to `after` breaks the policy (empty: allowed). */
function forbidden(fx: PolicyFixture, o: Op, before: Map<string, Node>, after: Map<string, Node>): string[] {
  const roots = fx.policy.compiled.roots;
  const rootOf = (b: string) => roots.find((r) => isWithin(b, r.source));
  const problems: string[] = [];
  const changed = new Set<string>();
  for (const [p, n] of after) {
    const old = before.get(p);
    if (!old || old.type !== n.type || old.mode !== n.mode || (n.type !== 'dir' && (old.content !== n.content || old.ino !== n.ino))) changed.add(p);
  }
  for (const p of before.keys()) if (!after.has(p)) changed.add(p);

  // a directory renamed by this op carries its contents along: those are moves, not creations
  const srcRoot = o.op === 'rename' ? roots.find((r) => fx.policy.compiled.locate(o.path) === r) : undefined;
  /** For a node inside a directory this op moved: its path at the other end of the move. */
  const otherEnd = (p: string): string | undefined => {
    if (!srcRoot || o.op !== 'rename') return undefined;
    const fromB = srcRoot.toBackend(o.path);
    const dst = fx.policy.compiled.locate(o.to);
    if (!dst || dst.kind !== 'root') return undefined;
    const toB = dst.toBackend(o.to);
    if (before.get(fromB)?.type !== 'dir' || after.has(fromB) || after.get(toB)?.type !== 'dir') return undefined;
    if (isWithin(p, toB) && p !== toB) return fromB + p.slice(toB.length);
    if (isWithin(p, fromB) && p !== fromB) return toB + p.slice(fromB.length);
    return undefined;
  };

  // a directory that looked empty but held hidden names goes aside (rmdir, rename over it) to a
  // kept name beside it, and comes back with a mkdir of its name: moves, nothing hidden lost
  const kept = keptMoves(fx, o, before, after);
  const inMove = (p: string) => kept.some(([a, b]) => isWithin(p, a) || isWithin(p, b));
  for (const [from, to] of kept) {
    for (const [p, n] of before) {
      if (!isWithin(p, from)) continue;
      const q = to + p.slice(from.length);
      const m = after.get(q);
      if (!m || m.type !== n.type || (n.type !== 'dir' && m.content !== n.content)) problems.push(`${p} was not kept whole at ${q}`);
      const root = rootOf(p);
      if (p !== from && root && !root.isHidden(root.toView(p))) problems.push(`${p} (visible) was kept aside`);
    }
  }
  const sizeByIno = new Map<number, number>();
  for (const n of before.values()) if (n.type === 'file') sizeByIno.set(n.ino, n.size);
  const touched = new Set<CompiledRoot>();
  for (const p of changed) {
    if (inMove(p)) continue;
    const root = rootOf(p);
    if (!root) {
      problems.push(`${p} changed outside every root`);
      continue;
    }
    touched.add(root);
    if (!root.writable) problems.push(`${p} changed in read-only root ${root.path}`);
    const view = root.toView(p);
    const n = after.get(p);
    const other = otherEnd(p);
    if (other !== undefined) {
      const otherView = root.toView(other);
      if (root.isHidden(view) !== root.isHidden(otherView)) problems.push(`${view} moved in or out of hiding`);
      if (root.isReadonly(view) !== root.isReadonly(otherView)) problems.push(`${view} moved in or out of read-only`);
      continue;
    }
    if (isWithin(p, '/') && p !== root.source && root.isHidden(view)) problems.push(`hidden ${view} changed`);
    if (root.isReadonly(view)) problems.push(`read-only ${view} changed`);
    if (n && n.type !== 'dir') {
      const old = before.get(p);
      const written = !old || old.content !== n.content || old.ino !== n.ino;
      if (written && !root.suffixAllowed(view)) problems.push(`${view} created or written without an allowed suffix`);
      // growth is per file (inode): a rename moves a size, it does not grow it
      const was = sizeByIno.get(n.ino) ?? 0;
      if (n.type === 'file' && root.maxFileBytes !== undefined && n.size > root.maxFileBytes && n.size > was) {
        problems.push(`${view} grew to ${n.size}, past maxFileBytes ${root.maxFileBytes}`);
      }
    }
  }
  if (touched.size > 1) problems.push(`one operation changed ${touched.size} roots`);
  return problems;
}

const KEPT = /^\.ledgerfs-kept\.\d+\./;

/** The kept-directory moves this op made: [from, to] backend paths of directories. */
function keptMoves(fx: PolicyFixture, o: Op, before: Map<string, Node>, after: Map<string, Node>): Array<[string, string]> {
  const moves: Array<[string, string]> = [];
  const base = (p: string) => p.slice(p.lastIndexOf('/') + 1);
  const parent = (p: string) => p.slice(0, p.lastIndexOf('/'));
  for (const [p, n] of after) {
    if (n.type !== 'dir' || !KEPT.test(base(p)) || before.has(p)) continue;
    // a new kept directory: its name says which directory went aside
    const from = `${parent(p)}/${base(p).replace(KEPT, '')}`;
    if (before.get(from)?.type === 'dir') moves.push([from, p]);
  }
  for (const [p, n] of before) {
    if (n.type !== 'dir' || !KEPT.test(base(p)) || after.has(p)) continue;
    const to = `${parent(p)}/${base(p).replace(KEPT, '')}`;
    if (after.get(to)?.type === 'dir' && o.op === 'mkdir') moves.push([p, to]);
  }
  return moves;
}

function usageOf(nodes: Map<string, Node>, root: CompiledRoot): { bytes: number; files: number } {
  const seen = new Set<number>();
  let bytes = 0;
  let files = 0;
  for (const [p, n] of nodes) {
    if (!isWithin(p, root.source) || p === root.source) continue;
    if (root.isHidden(root.toView(p))) continue; // hidden names cost the program nothing
    if (seen.has(n.ino)) continue;
    seen.add(n.ino);
    files++;
    if (n.type !== 'dir') bytes += n.size;
  }
  return { bytes, files };
}

const RUNS = Number(process.env.LEDGERFS_PROPERTY_RUNS ?? 150);

describe('property: policy', () => {
  it(`random operations under random policies never leave a forbidden change, and usage equals a fresh recount (${RUNS} cases)`, async () => {
    await fc.assert(
      fc.asyncProperty(policyArb.chain((spec) => opsArb(spec).map((ops) => ({ spec, ops }))), async ({ spec, ops }) => {
        const fx = await policyFixture(policyYaml(spec), (src) => putFiles(src, INITIAL));
        try {
          for (const o of ops) {
            const before = snapshot(fx.src);
            const usageBefore = fx.policy.compiled.roots.map((r) => fx.policy.usage.of(r));
            const snapshotUsage = usageBefore.map((u) => (u ? { ...u } : null));
            let refused: unknown;
            try {
              await apply(fx, o);
            } catch (err) {
              if (!(err instanceof VfsError)) throw err;
              refused = err;
            }
            const after = snapshot(fx.src);
            if (o.op !== 'operator') {
              const problems = forbidden(fx, o, before, after);
              expect(problems, `${JSON.stringify(o)} (${refused ? (refused as VfsError).code : 'ok'}): ${problems.join('; ')}`).toEqual([]);
            }
            for (const [i, root] of fx.policy.compiled.roots.entries()) {
              const u = fx.policy.usage.of(root);
              if (!u) continue;
              expect(u, `usage of ${root.path} after ${JSON.stringify(o)}`).toEqual(await fx.recount(i));
              expect(u).toEqual(usageOf(after, root));
              const was = snapshotUsage[i] as { bytes: number; files: number };
              if (o.op !== 'operator') {
                if (root.quota.bytes !== undefined && u.bytes > was.bytes) expect(u.bytes, `bytes quota of ${root.path}`).toBeLessThanOrEqual(root.quota.bytes);
                if (root.quota.files !== undefined && u.files > was.files) expect(u.files, `files quota of ${root.path}`).toBeLessThanOrEqual(root.quota.files);
              }
            }
          }
        } finally {
          await fx.close();
        }
      }),
      {
        numRuns: RUNS,
        ...(process.env.LEDGERFS_PROPERTY_SEED ? { seed: Number(process.env.LEDGERFS_PROPERTY_SEED), path: process.env.LEDGERFS_PROPERTY_PATH } : {}),
      },
    );
  }, 300_000);
});
