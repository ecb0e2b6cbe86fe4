import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startMount } from '../helpers/mount.js';
import { putFiles } from '../helpers/policy.js';
import { processesWith, sandboxDir, waitUntil, type RunOutcome, type SandboxDir } from '../helpers/sandbox.js';

const CASE_YAML = `backend: { type: local, path: ./src }
roots:
  - path: /projects/Wilson-MVA
    mode: rw
    quota: { bytes: 2MiB, files: 100 }
    suffixes: [.pdf, .md, .txt, .json]
  - path: /Tools
    mode: ro
hide: ["**/.env"]
`;

const FILES: Record<string, string> = {
  'projects/Wilson-MVA/notes.md': '# Wilson MVA\n',
  'projects/Wilson-MVA/.env': 'API_KEY=secret\n',
  'Tools/build.py': 'print("build")\n',
};

function report(r: RunOutcome): string {
  return `exit ${r.code}\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`;
}

describe('ledgerfs run: what the program may not do', () => {
  let sb: SandboxDir;
  let policy: string;
  beforeEach(() => {
    sb = sandboxDir((src) => putFiles(src, FILES));
    policy = path.join(sb.dir, 'case.yaml');
    fs.writeFileSync(policy, CASE_YAML);
  });
  afterEach(() => {
    const left = sb.mounts();
    sb.cleanup();
    expect(left).toEqual([]);
  });

  it('a write into a read-only root fails with EROFS, and the program sees it (and why)', async () => {
    const r = await sb.run([
      '--policy', policy, '--state', sb.state, '--',
      'sh', '-c',
      [
        `python3 -c "
import errno
for p in ['Tools/new.txt', 'Tools/build.py']:
    try:
        open(p, 'a').write('x')
        print(p, 'written')
    except OSError as e:
        print(p, errno.errorcode[e.errno])
"`,
        'echo more >> Tools/build.py; echo "shell=$?"',
        'cat projects/Wilson-MVA/.env; echo "env=$?"',
        'tail -n 1 .ledgerfs/denials',
      ].join('\n'),
    ]);
    expect(r.code, report(r)).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines.slice(0, 4)).toEqual(['Tools/new.txt EROFS', 'Tools/build.py EROFS', 'shell=2', 'env=1']);
    expect(r.stderr).toMatch(/Tools\/build\.py: Read-only file system/);
    expect(r.stderr).toMatch(/\.env: No such file or directory/);
    expect(lines[4]).toMatch(/ \/Tools\/build\.py EROFS: write to \/Tools\/build\.py refused: \/Tools is read-only/);
    expect(fs.readFileSync(path.join(sb.src, 'Tools/build.py'), 'utf8')).toBe('print("build")\n');
    expect(fs.existsSync(path.join(sb.src, 'Tools/new.txt'))).toBe(false);
  });

  it('a runaway writer stops at the quota with EDQUOT', async () => {
    const r = await sb.run([
      '--policy', policy, '--state', sb.state, '--',
      'sh', '-c',
      [
        'dd if=/dev/zero of=projects/Wilson-MVA/dump.pdf bs=64K count=10000 2>/tmp/dd.err; echo "dd=$?"; cat /tmp/dd.err >&2',
        `python3 -c "
import errno
try:
    with open('projects/Wilson-MVA/more.pdf', 'wb') as f:
        while True: f.write(b'x' * 65536)
except OSError as e:
    print('python', errno.errorcode[e.errno])
"`,
      ].join('\n'),
    ]);
    expect(r.stdout, report(r)).toBe('dd=1\npython EDQUOT\n');
    expect(r.stderr).toMatch(/dump\.pdf.*Disk quota exceeded/);
    const sizes = ['dump.pdf', 'more.pdf'].map((f) => fs.statSync(path.join(sb.src, 'projects/Wilson-MVA', f)).size);
    expect(sizes[0]).toBeGreaterThan(1024 * 1024);
    expect((sizes[0] ?? 0) + (sizes[1] ?? 0) + FILES['projects/Wilson-MVA/notes.md']!.length + FILES['projects/Wilson-MVA/.env']!.length)
      .toBeLessThanOrEqual(2 * 1024 * 1024);
  });

  it('leaves the host outside the workspace untouched: $HOME, /etc, the source directory itself', async () => {
    const tag = `ledgerfs-escape-${process.pid}-${Date.now()}`;
    const home = os.homedir();
    const srcReal = fs.realpathSync(sb.src);
    // outside the private /tmp, the sandbox's root is read-only: writes fail there
    const refused = [path.join(home, tag), `/etc/${tag}`, `/usr/${tag}`, `/${tag}`];
    // host paths under /tmp land in the sandbox's own /tmp (if anywhere), never on the host
    const elsewhere = [path.join(srcReal, tag), path.join(sb.dir, tag)];
    const targets = [...refused, ...elsewhere];
    const script = [`ls '${srcReal}' >/dev/null 2>&1 && echo "sees source" || echo "no source"`];
    script.push(...targets.map((t) => `(mkdir -p "$(dirname '${t}')" 2>/dev/null; echo pwned > '${t}') 2>/dev/null && echo "wrote ${t}" || echo "refused ${t}"`));
    script.push('echo ok > inside.md && echo wrote-workspace', `echo ok > "$HOME/${tag}" && echo wrote-home`, `echo ok > /tmp/${tag} && echo wrote-tmp`);
    const before = fs.readdirSync(sb.src).sort();
    const r = await sb.run(['--source', sb.src, '--state', sb.state, '--', 'sh', '-c', script.join('\n')]);
    expect(r.code, report(r)).toBe(0);
    const said = r.stdout.split('\n').filter(Boolean);
    expect(said[0]).toBe('no source');
    expect(said.slice(1, 1 + refused.length)).toEqual(refused.map((t) => `refused ${t}`));
    expect(said.slice(1 + targets.length)).toEqual(['wrote-workspace', 'wrote-home', 'wrote-tmp']);
    for (const t of [...targets, path.join(os.tmpdir(), tag), `/tmp/${tag}`]) expect(fs.existsSync(t), t).toBe(false);
    expect(fs.readdirSync(sb.src).sort()).toEqual([...before, 'inside.md'].sort());
  });

  it('returns the program\'s exit code as is, and 128+N when a signal killed it', async () => {
    const seven = await sb.run(['--source', sb.src, '--state', sb.state, '--', 'sh', '-c', 'echo partial; exit 7']);
    const killed = await sb.run(['--source', sb.src, '--state', sb.state, '--', 'sh', '-c', 'kill -TERM $$']);
    expect(seven.code, report(seven)).toBe(7);
    expect(seven.stdout).toBe('partial\n');
    expect(killed.code, report(killed)).toBe(128 + 15);
  });

  // while the program runs; and as soon as the workspace is mounted, before (or while) bwrap
  // starts and arms --die-with-parent: then the daemon stops the sandbox itself
  for (const moment of ['while the program runs', 'right after mounting'] as const) {
    it(`a run killed with SIGKILL ${moment} leaves no mount behind, nor the program, nor its daemon`, async () => {
      const token = `${(moment === 'right after mounting' ? 300 : 500) + (process.pid % 100)}.5`; // a sleep nobody else runs
      const sleeping = () => processesWith(['sleep', token]);
      const run = sb.start(['--source', sb.src, '--state', sb.state, '--', 'sleep', token]);
      const ready = () => sb.mounts().length === 1 && (moment === 'right after mounting' || sleeping().length > 0);
      expect(await waitUntil(ready, 30_000), run.stderr()).toBe(true);
      const daemon = processesWith([process.execPath]).filter((pid) => {
        const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
        return argv.includes('--parent-link') && argv.some((a) => a.startsWith(sb.tmp));
      });
      expect(daemon).toHaveLength(1);
      run.child.kill('SIGKILL');
      expect(await run.exited).toBe(137);
      const gone = await waitUntil(() => sb.mounts().length === 0 && sleeping().length === 0 && !fs.existsSync(`/proc/${daemon[0]}`), 20_000);
      expect(gone, `mounts: ${sb.mounts().join(', ')}; sleep: ${sleeping().join(', ')}`).toBe(true);
      expect(fs.readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(sb.tmp);
      expect(fs.readdirSync(sb.tmp)).toEqual([]); // the daemon removed the mount point it served
      await run.done;
    });
  }

  it('SIGTERM reaches the program (it may clean up); a second one ends the sandbox; either way everything is unmounted', async () => {
    const token = `${400 + (process.pid % 100)}.5`;
    const sleeping = () => processesWith(['sleep', token]);
    // a program that handles SIGTERM: writes a note into the workspace, exits 5
    const polite = sb.start(['--source', sb.src, '--state', sb.state, '--', 'sh', '-c', `trap 'echo saved > note.txt; exit 5' TERM; sleep ${token} & wait`]);
    expect(await waitUntil(() => sleeping().length > 0, 30_000), polite.stderr()).toBe(true);
    polite.child.kill('SIGTERM');
    const r = await polite.done;
    expect(r.code, report(r)).toBe(5);
    expect(fs.readFileSync(path.join(sb.src, 'note.txt'), 'utf8')).toBe('saved\n');
    expect(sb.mounts()).toEqual([]);
    expect(sleeping()).toEqual([]);

    // one that ignores it: the second signal tears the sandbox down
    const stubborn = sb.start(['--source', sb.src, '--state', sb.state, '--', 'sh', '-c', `trap '' TERM; sleep ${token}; sleep ${token}`]);
    expect(await waitUntil(() => sleeping().length > 0, 30_000), stubborn.stderr()).toBe(true);
    stubborn.child.kill('SIGTERM');
    await new Promise((res) => setTimeout(res, 300));
    expect(stubborn.child.exitCode).toBeNull();
    stubborn.child.kill('SIGTERM');
    const r2 = await stubborn.done;
    expect(r2.code, report(r2)).toBe(128 + 15);
    expect(sb.mounts()).toEqual([]);
    expect(sleeping()).toEqual([]);
    expect(fs.readdirSync(sb.tmp)).toEqual([]);
  });

  it('puts the workspace at --at (the working directory), with no network unless --network', async () => {
    const r = await sb.run(['--source', sb.src, '--state', sb.state, '--at', '/srv/case', '--', 'sh', '-c', 'pwd; echo "$LEDGERFS_WORKSPACE"; ls Tools; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " "']);
    expect(r.code, report(r)).toBe(0);
    expect(r.stdout).toBe('/srv/case\n/srv/case\nbuild.py\nlo\n');
  });
});

describe('ledgerfs run: clear errors', () => {
  let sb: SandboxDir;
  beforeEach(() => {
    sb = sandboxDir();
  });
  afterEach(() => {
    sb.cleanup();
  });

  it('no program, no workspace, no bwrap, no user namespaces: says so, exits 125, mounts nothing', async () => {
    const noCommand = await sb.run(['--source', sb.src, '--']);
    expect(noCommand.code).toBe(125);
    expect(noCommand.stderr).toMatch(/name the program to run after --/);

    const noWorkspace = await sb.run(['--', 'true']);
    expect(noWorkspace.code).toBe(125);
    expect(noWorkspace.stderr).toMatch(/name the workspace: --source DIR, --policy FILE, or --mount MOUNTPOINT/);

    const noBwrap = await sb.run(['--source', sb.src, '--', 'true'], { env: { PATH: path.join(sb.dir, 'empty') } });
    expect(noBwrap.code).toBe(125);
    expect(noBwrap.stderr).toMatch(/bubblewrap \(bwrap\) is not installed.*apt-get install -y bubblewrap/);

    // A host without unprivileged user namespaces: bwrap's own complaint, as it prints it there.
    const bin = path.join(sb.dir, 'bin');
    fs.mkdirSync(bin);
    fs.writeFileSync(
      path.join(bin, 'bwrap'),
      "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.' >&2\nexit 1\n",
      { mode: 0o755 },
    );
    const noUserns = await sb.run(['--source', sb.src, '--', 'true'], { env: { PATH: `${bin}:/usr/bin:/bin` } });
    expect(noUserns.code).toBe(125);
    expect(noUserns.stderr).toMatch(/bubblewrap cannot create namespaces here \(bwrap: No permissions to creating new namespace.*\)\. As non-root this needs unprivileged user namespaces/);

    const badAt = await sb.run(['--source', sb.src, '--at', '/usr/ws', '--', 'true']);
    expect(badAt.code).toBe(125);
    expect(badAt.stderr).toMatch(/--at \/usr\/ws: \/usr holds the sandbox's system files/);

    const exposes = await sb.run(['--source', sb.src, '--ro', sb.dir, '--', 'true']);
    expect(exposes.code).toBe(125);
    expect(exposes.stderr).toMatch(/--ro .* would show the program the workspace source .* directly, past the policy/);

    expect(sb.mounts()).toEqual([]);
    expect(fs.readdirSync(sb.tmp)).toEqual([]);
  });
});

describe('ledgerfs run --mount: a mount started beforehand', () => {
  it('runs in it, leaves it mounted, and names its session; --session cannot be chosen', async () => {
    const sb = sandboxDir();
    const state = path.join(sb.dir, 'mount-state');
    const m = await startMount({ args: ['--state', state, '--session', 'shared-mount'] });
    try {
      const r = await sb.run(['--mount', m.mnt, '--state', state, '--', 'sh', '-c', 'echo from-sandbox > note.txt && ls']);
      expect(r.code, report(r)).toBe(0);
      expect(r.stdout).toBe('note.txt\n');
      expect(r.stderr).toContain(`using the mount at ${m.mnt}, session shared-mount`);
      expect(fs.readFileSync(path.join(m.src, 'note.txt'), 'utf8')).toBe('from-sandbox\n');
      expect(m.alive()).toBe(true);
      expect(fs.readFileSync('/proc/self/mountinfo', 'utf8')).toContain(` ${m.mnt} `);
      const log = JSON.parse(sb.cli(['log', '--state', state, '--json'])) as { session: string; paths: string[] }[];
      expect(log.some((e) => e.session === 'shared-mount' && e.paths[0] === '/note.txt')).toBe(true);

      const chosen = await sb.run(['--mount', m.mnt, '--session', 'mine', '--', 'true']);
      expect(chosen.code).toBe(125);
      expect(chosen.stderr).toMatch(/--session cannot be chosen with --mount/);
    } finally {
      await m.stop();
      sb.cleanup();
    }
  });
});
