import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI, forceUnmount, onGcs } from '../helpers/mount.js';
import { mountDirPrefix } from '../helpers/run.js';

/*
 * Issue 16, conventions: `mount --daemon` returns only once the mount answers stat (or fails with
 * the daemon's sentence), `--log-file`, `--log-format` (text on a terminal), and systemd's
 * Type=notify readiness, received here by a real unix datagram socket (python3) as systemd would.
 */

interface Scratch { dir: string; src: string; mnt: string; env: NodeJS.ProcessEnv }

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function answersStat(mnt: string): boolean {
  return fs.statSync(mnt).dev !== fs.statSync(path.dirname(mnt)).dev;
}

describe.skipIf(onGcs)('mount --daemon, --log-file, --log-format, systemd readiness', () => {
  const scratches: Scratch[] = [];
  const children: ChildProcess[] = [];
  const pids: number[] = [];
  afterEach(async () => {
    for (const c of children.splice(0)) if (c.exitCode === null) c.kill('SIGKILL');
    for (const s of scratches.splice(0)) {
      forceUnmount(s.mnt);
      fs.rmSync(s.dir, { recursive: true, force: true });
    }
    for (const pid of pids.splice(0)) {
      for (let i = 0; i < 100 && alive(pid); i++) await sleep(50);
      if (alive(pid)) process.kill(pid, 'SIGKILL');
    }
  });

  function scratch(): Scratch {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), mountDirPrefix()));
    const s = { dir, src: path.join(dir, 'src'), mnt: path.join(dir, 'mnt'), env: { ...process.env, XDG_STATE_HOME: path.join(dir, 'state-home') } };
    fs.mkdirSync(s.src);
    fs.mkdirSync(s.mnt);
    fs.writeFileSync(path.join(s.src, 'hello.txt'), 'hello\n');
    scratches.push(s);
    return s;
  }

  function cli(s: Scratch, args: string[]) {
    return spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: s.env, timeout: 120_000, killSignal: 'SIGKILL' });
  }

  it('--daemon returns 0 only once the mount answers stat, logs to --log-file, and unmount ends the daemon', async () => {
    const s = scratch();
    const log = path.join(s.dir, 'daemon.log');
    const r = cli(s, ['mount', '--daemon', '--log-file', log, '--source', s.src, s.mnt]);
    expect(r.status, r.stderr).toBe(0);
    const pid = Number(r.stdout.trim());
    pids.push(pid);
    expect(pid).toBeGreaterThan(0);
    // no waiting: the moment it returned, the mount answers
    expect(answersStat(s.mnt)).toBe(true);
    expect(fs.readFileSync(path.join(s.mnt, 'hello.txt'), 'utf8')).toBe('hello\n');
    expect(alive(pid)).toBe(true);
    // the whole banner came through before the parent left; no Ctrl-C to offer
    expect(r.stderr).toContain(`is mounted at ${s.mnt}`);
    expect(r.stderr).toMatch(/\n {2}stop: {2}\S+.* unmount .*\n {2}journal: .*\(session /);
    expect(r.stderr).not.toContain('Ctrl-C');
    // the daemon is on its own: not this test's child, in a session of its own
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    expect(Number(stat[3])).toBe(pid); // session id
    const lines = fs.readFileSync(log, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { msg: string; pid: number });
    expect(lines.some((l) => l.msg === 'mounted' && l.pid === pid)).toBe(true);

    const u = cli(s, ['unmount', s.mnt]);
    expect(u.status, u.stderr).toBe(0);
    for (let i = 0; i < 200 && alive(pid); i++) await sleep(50);
    expect(alive(pid)).toBe(false);
    expect(fs.readFileSync(log, 'utf8')).toContain('"msg":"unmounted"');
  });

  it('unmount returns once the daemon has let go of its journal: unmount && rollback (or apply, tag) works on the unmounted workspace', () => {
    for (let round = 0; round < 4; round++) {
      const s = scratch();
      const state = path.join(s.dir, 'state');
      const r = cli(s, ['mount', '--daemon', '--source', s.src, '--state', state, s.mnt]);
      expect(r.status, r.stderr).toBe(0);
      pids.push(Number(r.stdout.trim()));
      fs.appendFileSync(path.join(s.mnt, 'hello.txt'), 'more\n');
      const u = cli(s, ['unmount', s.mnt]);
      expect(u.status, u.stderr).toBe(0);
      const lock = path.join(state, 'lock');
      const holder = fs.existsSync(lock) ? (JSON.parse(fs.readFileSync(lock, 'utf8')) as { pid: number }).pid : null;
      expect(holder !== null && alive(holder), `round ${round}: the daemon still holds the journal after unmount returned`).toBe(false);
    }
  });

  it('--daemon fails with the daemon\'s own sentence and exit code, and leaves nothing mounted', () => {
    const s = scratch();
    const missing = cli(s, ['mount', '--daemon', '--source', path.join(s.dir, 'nope'), s.mnt]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toBe(`ledgerfs: source directory ${path.join(s.dir, 'nope')} does not exist\n`);
    const file = path.join(s.dir, 'file');
    fs.writeFileSync(file, '');
    const notDir = cli(s, ['mount', '--daemon', '--source', s.src, file]);
    expect(notDir.status).toBe(2);
    expect(notDir.stderr).toMatch(/^ledgerfs: .*not a directory/);
    expect(answersStat(s.mnt)).toBe(false);
    expect(fs.readFileSync('/proc/mounts', 'utf8')).not.toContain(s.dir);
  });

  it('--log-format text writes readable lines; json is one object a line; a terminal gets text by default', () => {
    const s = scratch();
    const textLog = path.join(s.dir, 'text.log');
    // a mount that fails after the logger is made: its first log lines are enough
    const bad = path.join(s.dir, 'nope');
    cli(s, ['mount', '--log-format', 'text', '--log-file', textLog, '--source', bad, s.mnt]);
    const text = fs.readFileSync(textLog, 'utf8');
    expect(text).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z INFO  open-file limit openFiles=\d+/m);
    expect(text).not.toContain('{"level"');
    const piped = cli(s, ['mount', '--source', bad, s.mnt]);
    expect(piped.stderr.split('\n')[0]).toMatch(/^\{"level":30,.*"msg":"open-file limit"\}$/);
    // on a terminal (script(1) gives the command a pty): text without asking
    const tty = spawnSync('script', ['-qec', `${process.execPath} ${CLI} mount --source ${bad} ${s.mnt}`, '/dev/null'], { encoding: 'utf8', env: s.env, timeout: 60_000 });
    expect(tty.stdout).toMatch(/Z INFO  open-file limit/);
    expect(tty.stdout).not.toContain('{"level"');
    const wrong = cli(s, ['mount', '--log-format', 'yaml', '--source', s.src, s.mnt]);
    expect(wrong.status).not.toBe(0);
    expect(wrong.stderr).toMatch(/--log-format.*yaml.*Allowed choices are text, json/);
  });

  it.skipIf(spawnSync('python3', ['--version']).status !== 0)('Type=notify: READY=1 from the daemon\'s own pid once the mount answers stat, STOPPING=1 at the end', async () => {
    const s = scratch();
    const sock = path.join(s.dir, 'notify.sock');
    // systemd's side: a datagram socket; print each message with the sender's pid (SO_PASSCRED)
    const receiver = spawn('python3', ['-u', '-c', `
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind(sys.argv[1])
print("bound", flush=True)
s.settimeout(120)
while True:
    msg, anc, flags, addr = s.recvmsg(4096, socket.CMSG_SPACE(12))
    pid = [struct.unpack("iII", d)[0] for (l, t, d) in anc if t == socket.SCM_CREDENTIALS]
    print(repr({"pid": pid[0] if pid else None, "msg": msg.decode()}), flush=True)
`, sock], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(receiver);
    let got = '';
    receiver.stdout?.on('data', (d: Buffer) => (got += d.toString()));
    for (let i = 0; i < 200 && !got.includes('bound'); i++) await sleep(50);
    expect(got).toContain('bound');

    const daemon = spawn(process.execPath, [CLI, 'mount', '--source', s.src, s.mnt], { env: { ...s.env, NOTIFY_SOCKET: sock }, stdio: ['ignore', 'ignore', 'pipe'] });
    children.push(daemon);
    let logs = '';
    daemon.stderr?.on('data', (d: Buffer) => (logs += d.toString()));
    for (let i = 0; i < 1200 && !got.includes('READY=1'); i++) await sleep(50);
    expect(got, logs).toContain('READY=1');
    expect(answersStat(s.mnt)).toBe(true);
    const ready = got.split('\n').find((l) => l.includes('READY=1')) as string;
    expect(ready).toContain(`'pid': ${daemon.pid},`);
    expect(ready).toContain(`MAINPID=${daemon.pid}`);
    expect(ready).toContain(`STATUS=serving ${fs.realpathSync(s.src)} at ${s.mnt}`);

    daemon.kill('SIGTERM');
    const code = await new Promise<number | null>((r) => daemon.once('exit', (c) => r(c)));
    expect(code, logs).toBe(0);
    for (let i = 0; i < 100 && !got.includes('STOPPING=1'); i++) await sleep(50);
    expect(got).toContain('STOPPING=1');
  });
});
