import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { sandboxDir, type SandboxDir } from '../helpers/sandbox.js';
import { CLI, startMount, type TestMount, onGcs } from '../helpers/mount.js';
import { SECRET_GLOBS } from '../../src/config/defaults.js';

/** A workspace with credentials lying in it, as a user's directory often has. */
function secrets(src: string): void {
  fs.writeFileSync(path.join(src, '.env'), 'API_KEY=hunter2\n');
  fs.writeFileSync(path.join(src, 'server.pem'), '-----BEGIN PRIVATE KEY-----\n');
  fs.writeFileSync(path.join(src, 'notes.md'), 'visible\n');
}

describe('run --source hides what the sandboxed preset hides, unless --preset trusted (issue 16.3)', () => {
  let sb: SandboxDir | undefined;
  afterEach(() => {
    sb?.cleanup();
    sb = undefined;
  });

  it('cat .env and server.pem: not there; notes.md is; --preset trusted shows them', async () => {
    sb = sandboxDir(secrets);
    const hidden = await sb.run(['--source', sb.src, '--state', sb.state, '--', 'sh', '-c', 'ls -a; cat notes.md; cat server.pem; cat .env']);
    expect(hidden.stdout).toContain('visible\n');
    expect(hidden.stdout).not.toContain('hunter2');
    expect(hidden.stdout).not.toContain('PRIVATE KEY');
    expect(hidden.stderr).toMatch(/\.env: No such file or directory/);
    expect(hidden.code).toBe(1); // cat's status: the file is not there
    // /.ledgerfs answers by name but is not listed: git add -A or tar c . must not take it
    expect(hidden.stdout.split('\n')).not.toContain('.ledgerfs');
    const policy = await sb.run(['--source', sb.src, '--state', sb.state, '--', 'cat', '.ledgerfs/policy']);
    expect(policy.stdout).toContain('hidden everywhere (these names do not exist): **/.env');
    const trusted = await sb.run(['--source', sb.src, '--state', sb.state, '--preset', 'trusted', '--', 'cat', '.env']);
    expect(trusted.stdout).toBe('API_KEY=hunter2\n');
    expect(trusted.code).toBe(0);
    const bad = await sb.run(['--policy', path.join(sb.dir, 'x.yaml'), '--preset', 'trusted', '--', 'true']);
    expect(bad.stderr).toMatch(/--preset applies to --source only/);
    expect(bad.code).toBe(125);
  });
});

describe('run --source refuses privileged changes by default (issue 13.8)', () => {
  let sb: SandboxDir | undefined;
  afterEach(() => {
    sb?.cleanup();
    sb = undefined;
  });

  it('chmod u+s and g+s on a file: EPERM and a denial line; nothing reaches the source; --preset trusted allows it', async () => {
    sb = sandboxDir((src) => fs.writeFileSync(path.join(src, 'tool'), '#!/bin/sh\n', { mode: 0o755 }));
    const r = await sb.run(['--source', sb.src, '--state', sb.state, '--', 'sh', '-c', 'chmod u+s tool; echo "u=$?"; chmod g+s tool; echo "g=$?"; cat .ledgerfs/denials']);
    expect(r.stdout).toMatch(/u=1/);
    expect(r.stdout).toMatch(/g=1/);
    expect(r.stderr).toMatch(/Operation not permitted/);
    expect(r.stdout).toMatch(/tool/); // the denial line names the file
    expect(fs.statSync(path.join(sb.src, 'tool')).mode & 0o6000).toBe(0);
    const trusted = await sb.run(['--source', sb.src, '--state', sb.state, '--preset', 'trusted', '--', 'chmod', 'u+s', 'tool']);
    expect(trusted.code).toBe(0);
    expect(fs.statSync(path.join(sb.src, 'tool')).mode & 0o4000).toBe(0o4000);
  });
});

describe('a policy file\'s hide list joins its preset\'s (issue 16.3)', () => {
  let m: TestMount | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await m?.stop();
    m = undefined;
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it.skipIf(onGcs)('preset sandboxed + hide: [**/.env]: server.pem stays hidden; policy check and the banner print the merged list', async () => {
    dir = fs.mkdtempSync(path.join(fs.realpathSync('/tmp'), 'ledgerfs-unit-hide-'));
    const ws = path.join(dir, 'ws');
    fs.mkdirSync(ws);
    secrets(ws);
    const policy = path.join(dir, 'p.yaml');
    fs.writeFileSync(policy, `preset: sandboxed\nbackend: {type: local, path: ${ws}}\nroots: [{path: /, mode: rw}]\nhide: ["**/.env", "drafts"]\nstate: ${path.join(dir, 'state')}\n`);
    const merged = [...SECRET_GLOBS, 'drafts'].join(', ');
    const check = spawnSync(process.execPath, [CLI, 'policy', 'check', policy], { encoding: 'utf8' });
    expect(check.stdout).toContain(`hidden everywhere (these names do not exist): ${merged}\n`);
    m = await startMount({ args: ['--policy', policy], omitSource: true });
    expect(fs.readdirSync(m.mnt).sort()).toEqual(['.ledgerfs', 'notes.md']);
    expect(() => fs.readFileSync(path.join(m!.mnt, 'server.pem'))).toThrow(/ENOENT/);
    // the banner follows the mount by a moment (the journal's control socket first)
    for (let i = 0; i < 100 && !m.logs().includes('  stop:'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(m.logs()).toContain(`  hidden: ${merged}\n`);
  });
});
