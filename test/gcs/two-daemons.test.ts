import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI, py, run, sh, startMount, type TestMount } from '../helpers/mount.js';
import { startGcsFixture, type GcsFixture } from './fixture.js';

/**
 * Two hosts on one bucket, played by two daemons with their own state directories on one
 * emulator. Close-to-open across daemons: a change by one shows in the other after the metadata
 * TTL (plus the kernel's attribute timeout); two writers of one file never both win: the later
 * upload is refused by its generation precondition, its close(2) fails with ESTALE, and its
 * bytes are kept in its journal's conflict area.
 */
describe('gcs: two daemons on one bucket', () => {
  let g: GcsFixture;
  let a: TestMount;
  let b: TestMount;
  const TTL = 0.5;
  beforeEach(async () => {
    g = await startGcsFixture();
    await g.seed(['shared.txt'], 'original\n');
    const args = (state: string) => ['--metadata-ttl', String(TTL), '--attr-timeout', String(TTL), '--entry-timeout', String(TTL), '--state', state];
    a = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args: args(path.join(fs.mkdtempSync('/tmp/ledgerfs-state-'), 's')) });
    b = await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args: args(path.join(fs.mkdtempSync('/tmp/ledgerfs-state-'), 's')) });
  });
  afterEach(async () => {
    const dirs = [a, b].map((m) => stateOf(m));
    await a?.stop();
    await b?.stop();
    await g?.stop();
    for (const d of dirs) if (d) fs.rmSync(path.dirname(d), { recursive: true, force: true });
  });

  const stateOf = (m: TestMount | undefined) => {
    const args = (m?.daemon.spawnargs ?? []) as string[];
    const i = args.indexOf('--state');
    return i >= 0 ? args[i + 1] : undefined;
  };

  const cli = (...args: string[]) => execFileSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...(a?.env ?? {}) } });

  async function eventually(fn: () => boolean, ms: number): Promise<number> {
    const t0 = Date.now();
    while (!fn()) {
      if (Date.now() - t0 > ms) throw new Error(`not within ${ms} ms`);
      await new Promise((r) => setTimeout(r, 50));
    }
    return Date.now() - t0;
  }

  it('a write by one is visible to the other after the TTL; so are a new file and a removal', async () => {
    expect(sh('cat shared.txt', b.mnt)).toBe('original\n'); // b has it cached now
    sh('printf "changed by a\\n" > shared.txt && printf new > fresh.txt', a.mnt);
    const limit = 1000 * (2 * TTL) + 2000; // TTL of our cache + the kernel's, and some slack
    await eventually(() => sh('cat shared.txt', b.mnt) === 'changed by a\n', limit);
    await eventually(() => fs.existsSync(path.join(b.mnt, 'fresh.txt')), limit);
    expect(sh('cat fresh.txt', b.mnt)).toBe('new');
    sh('rm fresh.txt', b.mnt);
    await eventually(() => !fs.existsSync(path.join(a.mnt, 'fresh.txt')), limit);
  });

  it('appends from both hosts in turn (a shared log): every line is kept, none overwritten', () => {
    // b has the file's size cached when a appends: b's kernel puts b's append at that old end
    // unless the daemon places O_APPEND writes at the end of the version its open fetched
    py(
      `import os
a, b = ${JSON.stringify(a.mnt)}, ${JSON.stringify(b.mnt)}
open(os.path.join(b, 'shared.txt')).read()
def append(root, line):  # as the shell's >> does: no seek to the end first (Python's 'a' seeks)
    fd = os.open(os.path.join(root, 'shared.txt'), os.O_WRONLY | os.O_APPEND)
    os.write(fd, line.encode())
    os.close(fd)
for i in range(3):
    append(a, 'a%d\\n' % i)
    append(b, 'b%d\\n' % i)`,
      a.mnt,
    );
    const want = 'original\na0\nb0\na1\nb1\na2\nb2\n';
    expect(sh('cat shared.txt', a.mnt)).toBe(want);
    expect(sh('cat shared.txt', b.mnt)).toBe(want);
  });

  it('two concurrent writers of one file: one close fails with ESTALE, its bytes are kept in its conflict area', async () => {
    const out = py(
      `
import errno, json, os, sys
fa = open(sys.argv[1] + '/shared.txt', 'r+b')
fb = open(sys.argv[2] + '/shared.txt', 'r+b')
# both write (and stage the generation they opened) before either closes; a write that came
# only after the other's upload would itself fail with ESTALE (its generation is gone)
fa.write(b'written by A\\n'); fa.flush()
fb.write(b'written by B, the loser\\n'); fb.flush()
res = {}
for name, f in (('a', fa), ('b', fb)):
    try:
        f.close(); res[name] = 'ok'
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(res))
`,
      a.dir,
      [a.mnt, b.mnt],
    );
    expect(JSON.parse(out)).toEqual({ a: 'ok', b: 'ESTALE' });
    // the bucket has A's version, both mounts show it
    expect(sh('cat shared.txt', a.mnt)).toBe('written by A\n');
    // B's version is kept, with a note saying what it is
    const conflicts = path.join(stateOf(b) as string, "conflicts");
    const files = fs.readdirSync(conflicts);
    const data = files.filter((f) => !f.endsWith('.json'));
    expect(data).toHaveLength(1);
    expect(fs.readFileSync(path.join(conflicts, data[0] as string), 'utf8')).toBe('written by B, the loser\n');
    const note = JSON.parse(fs.readFileSync(path.join(conflicts, `${data[0]}.json`), 'utf8')) as { reason: string; path: string };
    expect(note).toMatchObject({ reason: 'changed-remotely', path: '/shared.txt' });
    await eventually(() => /local version not uploaded; kept in the conflict area/.test(b.logs()), 5000);
    // nothing went into A's conflict area
    expect(fs.existsSync(path.join(stateOf(a) as string, 'conflicts'))).toBe(false);
    // B's journal records it with its write: the path, the generations, where the bytes are
    const [meta] = await g.storage.bucket(g.bucket).file('shared.txt').getMetadata();
    const kept = path.join(conflicts, data[0] as string);
    const log = JSON.parse(cli('log', '--state', stateOf(b) as string, '--json')) as Array<{ seq: number; op: string; paths: string[]; conflicts?: unknown[] }>;
    const write = log.find((e) => e.op === 'write' && e.paths[0] === '/shared.txt');
    expect(write?.conflicts).toEqual([
      expect.objectContaining({ kind: 'conflict', of: write?.seq, path: '/shared.txt', reason: 'changed-remotely', currentGeneration: String(meta.generation), localFile: kept, size: 24 }),
    ]);
    expect(BigInt((write?.conflicts?.[0] as { expectedGeneration: string }).expectedGeneration)).toBeLessThan(BigInt(meta.generation as string));
    expect(cli('log', '--state', stateOf(b) as string)).toMatch(new RegExp(`write /shared.txt .*\\[conflict: not uploaded: the object changed in the bucket meanwhile \\(generation \\d+ -> ${meta.generation}\\); the local version \\(24 bytes\\) is kept at ${kept}\\]`));
    const show = cli('show', '--state', stateOf(b) as string, String(write?.seq));
    expect(show).toContain(`conflict  /shared.txt: not uploaded`);
    expect(show).toContain(`restore   cp ${kept} MOUNTPOINT/shared.txt`);
    // and A's journal has no conflict
    expect(cli('log', '--state', stateOf(a) as string)).not.toContain('conflict');
  });

  it('a conflict found at the close after fchmod split the write session is journaled with that session', async () => {
    const out = py(
      `
import errno, json, os, sys
f = open(sys.argv[1] + '/shared.txt', 'r+b')
f.write(b'local edit\\n'); f.flush()
os.fchmod(f.fileno(), 0o600)   # ends the journal's write session; the upload waits for close
with open(sys.argv[2] + '/shared.txt', 'wb') as o: o.write(b'meanwhile on the other host\\n')
try:
    f.close(); print('ok')
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
`,
      a.dir,
      [b.mnt, a.mnt],
    );
    expect(out.trim()).toBe('ESTALE');
    const log = JSON.parse(cli('log', '--state', stateOf(b) as string, '--json')) as Array<{ seq: number; op: string; paths: string[]; conflicts?: Array<{ localFile: string; of: number }> }>;
    const write = log.find((e) => e.op === 'write' && e.paths[0] === '/shared.txt');
    const c = write?.conflicts?.[0];
    expect(c?.of).toBe(write?.seq);
    expect(fs.readFileSync(c?.localFile as string, 'utf8')).toBe('local edit\n');
    await eventually(() => sh('cat shared.txt', b.mnt) === 'meanwhile on the other host\n', 5000);
  });

  it('two O_CREAT|O_EXCL of one new name on two daemons: exactly one wins', () => {
    const out = py(
      `
import errno, json, os, sys
res = []
for d in sys.argv[1:]:
    try:
        fd = os.open(d + '/only-one', os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, d.encode()); os.close(fd); res.append('ok')
    except OSError as e:
        res.append(errno.errorcode.get(e.errno, str(e.errno)))
print(json.dumps(res))
`,
      a.dir,
      [a.mnt, b.mnt],
    );
    expect(JSON.parse(out)).toEqual(['ok', 'EEXIST']);
    expect(sh('cat only-one', b.mnt)).toBe(a.mnt);
  });
});

/**
 * A name another host removed, created again within the metadata TTL: the TTL lets stat and
 * listings lag, never the create. The kernel still holds the name and sends OPEN (O_CREAT
 * stripped), not CREATE; the daemon finds the object gone and answers ESTALE, so the kernel looks
 * the name up again and creates it. One mount with --durability journal, one without.
 */
describe('gcs: two daemons, a name removed on one and created again on the other', () => {
  let g: GcsFixture;
  const mounts: TestMount[] = [];
  const states: string[] = [];
  const ENTRY = 2;
  const how = { redirect: 'echo y > f', append: 'echo y >> f', touch: 'touch f && echo y > f', rdwr: 'python3 -c "import os; os.write(os.open(\'f\', os.O_RDWR | os.O_CREAT), b\'y\\n\')"' };
  const names = Object.keys(how).flatMap((h) => ['a-b', 'b-a'].flatMap((dir) => [`${h}-${dir}-now`, `${h}-${dir}-later`]));
  beforeEach(async () => {
    g = await startGcsFixture('ledgerfs-recreate');
    await g.seed(names, 'x\n');
    // a TTL no step outlasts: the deleted name stays cached as a file where it is created
    for (const extra of [['--durability', 'journal'], []]) {
      const state = fs.mkdtempSync('/tmp/ledgerfs-state-');
      states.push(state);
      const args = ['--metadata-ttl', '60', '--attr-timeout', String(ENTRY), '--entry-timeout', String(ENTRY), '--state', path.join(state, 's'), ...extra];
      mounts.push(await startMount({ gcs: { emulator: g.emulator, bucket: g.bucket }, args }));
    }
  });
  afterEach(async () => {
    for (const m of mounts.splice(0)) await m.stop();
    await g?.stop();
    for (const d of states.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });

  it('open(O_CREAT) creates it (a racing delete is no error), whichever host removed it, before and after the kernel revalidates the name', async () => {
    const [a, b] = mounts as [TestMount, TestMount];
    const results: Record<string, string> = {};
    for (const [h, cmd] of Object.entries(how)) {
      for (const [dir, remover, creator] of [['a-b', a, b], ['b-a', b, a]] as const) {
        for (const when of ['now', 'later']) {
          const name = `${h}-${dir}-${when}`;
          expect(sh(`cat ${name}`, creator.mnt) + sh(`cat ${name}`, remover.mnt)).toBe('x\nx\n');
          sh(`rm ${name}`, remover.mnt);
          // later: the kernel's entry has expired and the daemon's cache answers its lookup
          if (when === 'later') await new Promise((r) => setTimeout(r, 1000 * ENTRY + 500));
          const r = run(cmd.replaceAll(' f', ` ${name}`).replaceAll("'f'", `'${name}'`), creator.mnt);
          results[name] = r.status === 0 ? sh(`cat ${name}`, creator.mnt) : r.stderr.trim();
        }
      }
    }
    expect(results).toEqual(Object.fromEntries(names.map((n) => [n, 'y\n'])));
    // and in the bucket (the journal mount's once its queued uploads land)
    const want = Object.fromEntries(names.map((n) => [n, 'y\n']));
    const t0 = Date.now();
    let objects = await g.objects();
    while (JSON.stringify(objects) !== JSON.stringify({ ...objects, ...want }) && Date.now() - t0 < 15_000) {
      await new Promise((r) => setTimeout(r, 200));
      objects = await g.objects();
    }
    expect(objects).toMatchObject(want);
  });
});
