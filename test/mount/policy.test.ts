import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, logsMatching, RUNNING_BINDING, run, sh, startMount, type TestMount } from '../helpers/mount.js';
import { putFiles } from '../helpers/policy.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/** The mount file from issue 3, exactly as written there. */
const CASE_YAML = `backend: { type: local, path: ./workspace }
roots:
  - path: /projects/Wilson-MVA
    mode: rw
    quota: { bytes: 50MiB, files: 1000 }
    maxFileBytes: 20MiB
    suffixes: [.pdf, .md, .txt, .docx, .json]
  - path: /Tools
    mode: ro
hide: ["**/.env", "**/*.pem"]
`;

const FILES: Record<string, string> = {
  'projects/Wilson-MVA/notes.md': '# Wilson MVA\n',
  'projects/Wilson-MVA/.env': 'API_KEY=secret\n',
  'projects/Other-Case/client.md': 'another client\n',
  'Tools/build.py': 'print("build")\n',
  'Tools/deploy.pem': 'PRIVATE KEY\n',
  'payroll.txt': 'outside every root\n',
};

interface PolicyMount {
  m: TestMount;
  /** the temp dir holding case.yaml and workspace/ */
  dir: string;
  ws: string;
  stop(): Promise<void>;
}

async function mountPolicy(yaml: string, files: Record<string, string>): Promise<PolicyMount> {
  const dir = makeTemp('policy-mount');
  const ws = path.join(dir, 'workspace');
  putFiles(ws, files);
  fs.writeFileSync(path.join(dir, 'case.yaml'), yaml);
  let m: TestMount;
  try {
    m = await startMount({ src: ws, omitSource: true, args: ['--policy', path.join(dir, 'case.yaml')] });
  } catch (err) {
    rmTemp(dir);
    throw err;
  }
  return {
    m, dir, ws,
    async stop() {
      try {
        await m.stop();
      } finally {
        rmTemp(dir);
      }
    },
  };
}

/**
 * The last line of /.ledgerfs/denials. The kernel caches the file's size for the attribute
 * timeout (1 s), and the text is pinned to what it was told, so wait that out between reads.
 */
let lastDenialsRead = 0;
async function lastDenial(mnt: string): Promise<string> {
  const wait = lastDenialsRead + 1100 - Date.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  const text = sh('cat .ledgerfs/denials', mnt);
  lastDenialsRead = Date.now();
  return text.trimEnd().split('\n').at(-1) ?? '';
}

describe('mount --policy: the case file as written', () => {
  let pm: PolicyMount;
  let mnt: string;
  const W = 'projects/Wilson-MVA';
  beforeAll(async () => {
    pm = await mountPolicy(CASE_YAML, FILES);
    mnt = pm.m.mnt;
  });
  afterAll(async () => {
    await pm?.stop();
  });

  it('shows only the roots and the way to them', () => {
    expect(sh('ls', mnt).split('\n').filter(Boolean)).toEqual(['Tools', 'projects']);
    expect(sh('ls -A', mnt)).toContain('.ledgerfs');
    expect(sh('ls projects', mnt)).toBe('Wilson-MVA\n');
    expect(sh('stat -c %a projects', mnt)).toBe('555\n');
    const other = run('ls projects/Other-Case; cat payroll.txt', mnt);
    expect(other.status).not.toBe(0);
    expect(other.stderr).toMatch(/Other-Case.*No such file or directory/);
    expect(other.stderr).toMatch(/payroll\.txt: No such file or directory/);
  });

  it('refuses writes to the read-only root with EROFS and explains the refusal', async () => {
    const r = run('echo hi > Tools/x', mnt);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/Tools\/x: Read-only file system/);
    expect(run('echo more >> Tools/build.py', mnt).stderr).toMatch(/Read-only file system/);
    expect(run('touch Tools/build.py', mnt).stderr).toMatch(/Read-only file system/);
    expect(run('rm -f Tools/build.py', mnt).stderr).toMatch(/Read-only file system/);
    expect(fs.readFileSync(path.join(pm.ws, 'Tools/build.py'), 'utf8')).toBe('print("build")\n');
    expect(fs.existsSync(path.join(pm.ws, 'Tools/x'))).toBe(false);
    expect(run('mkdir projects/new', mnt).stderr).toMatch(/Read-only file system/);

    const line = await lastDenial(mnt);
    expect(line).toMatch(/ mkdir \/projects\/new EROFS: make directory \/projects\/new refused: \/projects is a read-only directory that only leads to the roots; writable roots: \/projects\/Wilson-MVA( \[by mkdir projects\/new\])?$/);
    expect(run('echo more >> Tools/build.py', mnt).status).not.toBe(0);
    expect(await lastDenial(mnt)).toMatch(
      /^\S+Z pid=\S+ open \/Tools\/build\.py EROFS: write to \/Tools\/build\.py refused: \/Tools is read-only; writable roots: \/projects\/Wilson-MVA( \[by [^\]]+\])?$/,
    );
    // every refusal is in the daemon's log too
    expect(pm.m.logs()).toMatch(/"msg":"denied by policy"/);
    expect(pm.m.logs()).toContain('"reason":"write to /Tools/build.py refused: /Tools is read-only; writable roots: /projects/Wilson-MVA"');
  });

  it('hides .env and *.pem: cat fails with ENOENT, ls does not show them, they cannot be created', () => {
    const r = run(`cat ${W}/.env`, mnt);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/\.env: No such file or directory/);
    expect(sh(`ls -A ${W}`, mnt)).not.toContain('.env');
    expect(sh('ls -A Tools', mnt)).toBe('build.py\n');
    expect(run(`echo API_KEY=stolen > ${W}/.env`, mnt).stderr).toMatch(/Permission denied/);
    expect(fs.readFileSync(path.join(pm.ws, 'projects/Wilson-MVA/.env'), 'utf8')).toBe('API_KEY=secret\n');
  });

  it('allows only the listed suffixes for files created or written', () => {
    expect(run(`echo 'rm -rf /' > ${W}/run.sh`, mnt).stderr).toMatch(/Permission denied/);
    sh(`echo ok > ${W}/ok.md && echo '{}' > ${W}/data.json`, mnt);
    expect(fs.readFileSync(path.join(pm.ws, 'projects/Wilson-MVA/ok.md'), 'utf8')).toBe('ok\n');
    expect(run(`mv ${W}/ok.md ${W}/ok.sh`, mnt).stderr).toMatch(/Permission denied/);
  });

  it('stops a file at maxFileBytes with EFBIG', () => {
    const r = run(`dd if=/dev/zero of=${W}/big.pdf bs=1M count=21`, mnt);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/File too large/);
    expect(fs.statSync(path.join(pm.ws, 'projects/Wilson-MVA/big.pdf')).size).toBe(20 * 1024 * 1024);
    expect(run(`truncate -s 21M ${W}/big.pdf`, mnt).stderr).toMatch(/File too large/);
    sh(`rm ${W}/big.pdf`, mnt);
  });

  // fuse-native has no fallocate op (the kernel answers EOPNOTSUPP itself)
  it.skipIf(RUNNING_BINDING === 'fuse-native')('judges fallocate as a write: EFBIG, EDQUOT (also for --keep-size), EROFS', async () => {
    expect(run(`fallocate -l 21M ${W}/big.pdf`, mnt).stderr).toMatch(/File too large/);
    expect(fs.statSync(path.join(pm.ws, 'projects/Wilson-MVA/big.pdf')).size).toBe(0); // made by the open, not grown
    sh(`fallocate -l 5M ${W}/a.pdf && fallocate -l 20M ${W}/b.pdf && fallocate -l 20M ${W}/x.pdf`, mnt);
    expect(run(`fallocate -l 20M ${W}/c.pdf`, mnt).stderr).toMatch(/Disk quota exceeded/);
    expect(await lastDenial(mnt)).toMatch(/ write \/projects\/Wilson-MVA\/c\.pdf EDQUOT: allocate space for \/projects\/Wilson-MVA\/c\.pdf refused: /);
    // blocks past the end are charged as a write to the same end would be (45 MiB of 50 used;
    // the largest file is 20 MiB)
    sh(`fallocate -n -o 5M -l 4M ${W}/a.pdf`, mnt); // 49 MiB
    expect(run(`fallocate -n -o 5M -l 10M ${W}/a.pdf`, mnt).stderr).toMatch(/Disk quota exceeded/);
    expect(run(`fallocate -n -o 5M -l 16M ${W}/a.pdf`, mnt).stderr).toMatch(/File too large/);
    expect(fs.statSync(path.join(pm.ws, 'projects/Wilson-MVA/a.pdf')).size).toBe(5 * 1024 * 1024);
    expect(run(`touch ${W}/d.pdf && fallocate -n -l 2M ${W}/d.pdf`, mnt).stderr).toMatch(/Disk quota exceeded/);
    sh(`fallocate -n -l 512K ${W}/d.pdf`, mnt); // what is left fits
    expect(run('fallocate -l 1M Tools/build.py', mnt).stderr).toMatch(/Read-only file system/);
    sh(`rm ${W}/big.pdf ${W}/a.pdf ${W}/b.pdf ${W}/x.pdf ${W}/c.pdf ${W}/d.pdf`, mnt);
  });

  it('shows the quota in df and stops dd at EDQUOT with the quota untouched by the failed write', async () => {
    expect(sh(`df -B1 --output=size ${W}`, mnt).trim().split('\n')[1]?.trim()).toBe(String(50 * 1024 * 1024));
    expect(sh(`df -h ${W}`, mnt)).toMatch(/ledgerfs:\S+\s+50M/); // the source names the file system
    expect(sh(`df --output=itotal ${W}`, mnt).trim().split('\n')[1]?.trim()).toBe('1000');
    sh(`dd if=/dev/zero of=${W}/a.pdf bs=1M count=20 status=none && dd if=/dev/zero of=${W}/b.pdf bs=1M count=20 status=none`, mnt);
    const r = run(`dd if=/dev/zero of=${W}/c.pdf bs=1M count=20`, mnt);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/Disk quota exceeded/);
    // what the backend holds (file sizes; directories count no bytes; hidden names cost the
    // program nothing) is what ledgerfs counts, within the quota, and the refused write would
    // have passed it
    const files = execFileSync('find', [path.join(pm.ws, 'projects/Wilson-MVA'), '-mindepth', '1', '-not', '-name', '.env', '-not', '-name', '*.pem', '-printf', '%y %s\\n'], { encoding: 'utf8' });
    const onDisk = files.split('\n').filter((l) => l.startsWith('f ')).reduce((n, l) => n + Number(l.slice(2)), 0);
    expect(onDisk).toBeLessThanOrEqual(50 * 1024 * 1024);
    expect(onDisk).toBeGreaterThan(50 * 1024 * 1024 - 1024 * 1024);
    await new Promise((r) => setTimeout(r, 1100)); // past the kernel's attribute cache (see lastDenial)
    const usage = sh('cat .ledgerfs/usage', mnt);
    expect(usage).toMatch(/\/projects\/Wilson-MVA\s+rw\s+\d+(\.\d)? MiB \/ 50 MiB \((9\d|100)%\)/);
    expect(usage).toContain(`/projects/Wilson-MVA bytes=${onDisk} files=${files.trim().split('\n').length} quota_bytes=52428800 quota_files=1000`);
    expect(sh(`df -h --output=avail ${W}`, mnt)).toMatch(/\s(0|[0-9.]+[KM])\n/);
    sh(`rm ${W}/a.pdf ${W}/b.pdf ${W}/c.pdf`, mnt);
    expect(sh(`df -B1 --output=used ${W}`, mnt).trim().split('\n')[1]?.trim()).toMatch(/^\d{1,5}$/); // a few KiB left
  });

  it('explains itself in /.ledgerfs', () => {
    const policy = sh('cat .ledgerfs/policy', mnt);
    expect(policy).toMatch(/\/projects\/Wilson-MVA {2}read-write/);
    expect(policy).toMatch(/quota: 50 MiB, 1000 files/);
    expect(policy).toMatch(/\/Tools {2}read-only/);
    expect(policy).toMatch(/hidden everywhere.*\*\*\/\.env, \*\*\/\*\.pem/);
    // root names only: nothing of where the workspace, the policy file or the journal are
    expect(policy).not.toContain(pm.dir);
    expect(policy).not.toContain(fs.realpathSync(pm.dir));
    expect(sh('cat .ledgerfs/usage', mnt)).toMatch(/\/Tools\s+ro\s+not counted/);
    expect(run('echo x > .ledgerfs/policy', mnt).stderr).toMatch(/Read-only file system/);
    expect(run('rm .ledgerfs/usage', mnt).stderr).toMatch(/Read-only file system/);
  });
});

describe('mount --policy: moving between roots', () => {
  let pm: PolicyMount;
  let mnt: string;
  beforeAll(async () => {
    pm = await mountPolicy(
      CASE_YAML.replace('hide:', '  - path: /scratch\n    source: /scratch-area\n    mode: rw\n    quota: { files: 5 }\nhide:'),
      { ...FILES, 'scratch-area/tool.sh': 'echo\n', 'projects/Wilson-MVA/memo.md': 'memo\n' },
    );
    mnt = pm.m.mnt;
  });
  afterAll(async () => {
    await pm?.stop();
  });

  it('mv between writable roots succeeds by copy + delete', () => {
    sh('mv projects/Wilson-MVA/memo.md scratch/', mnt);
    expect(fs.readFileSync(path.join(pm.ws, 'scratch-area/memo.md'), 'utf8')).toBe('memo\n');
    expect(fs.existsSync(path.join(pm.ws, 'projects/Wilson-MVA/memo.md'))).toBe(false);
  });

  it('mv is judged piece by piece: the target refuses the copy, the source stays', () => {
    const r = run('mv scratch/tool.sh projects/Wilson-MVA/', mnt);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/Permission denied/);
    expect(fs.existsSync(path.join(pm.ws, 'scratch-area/tool.sh'))).toBe(true);
    const fromRo = run('mv Tools/build.py scratch/', mnt); // the copy lands, the delete is refused
    expect(fromRo.stderr).toMatch(/Read-only file system/);
    expect(fs.existsSync(path.join(pm.ws, 'Tools/build.py'))).toBe(true);
  });

  it('hard links across roots are EXDEV', () => {
    expect(run('ln projects/Wilson-MVA/notes.md scratch/notes.md', mnt).stderr).toMatch(/Invalid cross-device link/);
  });

  it('df on each root shows its own limits', () => {
    expect(sh('df --output=itotal scratch', mnt).trim().split('\n')[1]?.trim()).toBe('5');
    expect(sh('df --output=itotal projects/Wilson-MVA', mnt).trim().split('\n')[1]?.trim()).toBe('1000');
  });
});

describe('mount --policy: command line', () => {
  it('refuses --policy with --source, and a broken file with field-level errors', () => {
    const dir = makeTemp('policy-cli');
    try {
      fs.writeFileSync(path.join(dir, 'bad.yaml'), CASE_YAML.replace('mode: rw', 'mode: rwx').replace('maxFileBytes', 'maxFileByte'));
      fs.mkdirSync(path.join(dir, 'mnt'));
      const both = run(`node ${CLI} mount --source ${dir} --policy ${dir}/bad.yaml ${dir}/mnt`, dir);
      expect(both.status).toBe(2);
      expect(both.stderr).toMatch(/--source and --policy cannot be used together/);
      const bad = run(`node ${CLI} mount --policy bad.yaml mnt`, dir);
      expect(bad.status).toBe(2);
      expect(bad.stderr).toContain('bad.yaml: roots[0].mode: expected "ro" or "rw", got "rwx"');
      expect(bad.stderr).toContain('bad.yaml: roots[0].maxFileByte: unknown field (did you mean "maxFileBytes"?)');
    } finally {
      rmTemp(dir);
    }
  });

  it('policy check prints the compiled view, and --json the same as data', () => {
    const dir = makeTemp('policy-cli');
    try {
      fs.writeFileSync(path.join(dir, 'case.yaml'), CASE_YAML);
      putFiles(path.join(dir, 'workspace'), { 'projects/Wilson-MVA/': '', 'Tools/': '' });
      const text = sh(`node ${CLI} policy check case.yaml`, dir);
      expect(text).toMatch(/\/projects\/Wilson-MVA {2}read-write\n\s+quota: 50 MiB, 1000 files\n\s+largest file: 20 MiB/);
      const json = JSON.parse(sh(`node ${CLI} policy check --json case.yaml`, dir)) as { roots: { path: string; mode: string }[]; synthesized: Record<string, string[]> };
      expect(json.roots.map((r) => `${r.path}:${r.mode}`)).toEqual(['/projects/Wilson-MVA:rw', '/Tools:ro']);
      expect(json.synthesized).toEqual({ '/': ['projects', 'Tools'], '/projects': ['Wilson-MVA'] });
      const bad = run(`node ${CLI} policy check nope.yaml`, dir);
      expect(bad.status).toBe(2);
      expect(bad.stderr).toMatch(/nope\.yaml: cannot read the mount file \(it does not exist\)/);
    } finally {
      rmTemp(dir);
    }
  });
});

describe('mount --policy: rmdir never tells that hidden names exist', () => {
  it('rm -r of a directory that still holds a hidden .env succeeds, the .env is kept aside (told to the operator), and rollback puts it back exactly', async () => {
    const dir = makeTemp('policy-rmdir');
    const ws = path.join(dir, 'ws');
    const state = path.join(dir, 'state');
    putFiles(ws, { 'w/d/.env': 'TOKEN=1\n', 'w/d/x.md': 'x\n', 'w/d/sub/id.pem': 'KEY', 'w/e.txt': 'e\n' });
    fs.writeFileSync(path.join(dir, 'p.yaml'), 'backend: {type: local, path: ./ws}\nroots: [{path: /w, mode: rw, quota: {files: 100}}]\nhide: ["**/.env", "**/*.pem"]\n');
    const tree = () => execFileSync('find', [ws, '-printf', '%P %y %s %m\\n'], { encoding: 'utf8' }).split('\n').sort().join('\n');
    const before = tree();
    let m: TestMount | undefined;
    try {
      m = await startMount({ src: ws, omitSource: true, args: ['--policy', path.join(dir, 'p.yaml'), '--state', state, '--session', 'rm'] });
      expect(sh('ls -A w/d w/d/sub', m.mnt)).toBe('w/d:\nsub\nx.md\n\nw/d/sub:\n');
      sh('rm -r w/d', m.mnt); // ENOTEMPTY would have said that something hidden is there
      expect(sh('ls -A w', m.mnt)).toBe('e.txt\n');
      expect(run('ls w/d', m.mnt).stderr).toMatch(/No such file or directory/);
      expect(fs.readFileSync(path.join(ws, 'w/.ledgerfs-kept.1.d/.env'), 'utf8')).toBe('TOKEN=1\n');
      const warned = (await logsMatching(m, /still held/)).split('\n').filter((l) => l.includes('still held'));
      expect(warned.length).toBe(2); // d/sub, then d
      expect(warned[1]).toMatch(/"level":40/);
      expect(warned[1]).toContain(`kept them in ${fs.realpathSync(ws)}/w/.ledgerfs-kept.1.d`);
      expect(sh('cat .ledgerfs/denials', m.mnt)).toMatch(/^# no refusals yet/);

      const rb = spawnSync(process.execPath, [CLI, 'rollback', '--state', state, '--session', 'rm'], { encoding: 'utf8', timeout: 60_000 });
      expect(rb.status, rb.stderr + rb.stdout).toBe(0);
      expect(tree()).toBe(before);
      expect(m.errors()).toEqual([]);
    } finally {
      await m?.stop();
      rmTemp(dir);
    }
  });
});
