import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { constants as C } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { JournalService } from '../../src/journal/service.js';
import { silentLogger } from '../../src/core/log.js';
import type { Caller } from '../../src/vfs/pipeline.js';
import { callerProcess, clearCallerCache } from '../../src/core/process-names.js';
import type { Vfs } from '../../src/vfs/vfs.js';
import { policyFixture, type PolicyFixture } from '../helpers/policy.js';

/** This process's command line as the journal should write it (args quoted like a shell). */
function ownCommand(): string {
  const args = fs.readFileSync('/proc/self/cmdline', 'utf8').split('\0').filter((a, i, all) => a !== '' || i < all.length - 1);
  return args.map((a) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}

/** create, write, close as the kernel would send them, on behalf of `caller` */
async function writeAs(vfs: Vfs, p: string, data: string, caller: Caller): Promise<void> {
  const fh = await vfs.create(p, 0o644, C.O_WRONLY | C.O_CREAT | C.O_TRUNC, caller);
  try {
    await vfs.write(fh, Buffer.from(data), data.length, 0, caller);
    await vfs.flush(fh, caller);
  } finally {
    await vfs.release(fh, caller);
  }
}

async function readAll(vfs: Vfs, p: string): Promise<string> {
  const fh = await vfs.open(p, C.O_RDONLY);
  try {
    const buf = Buffer.alloc(1 << 16);
    const n = await vfs.read(fh, buf, buf.length, 0);
    return buf.subarray(0, n).toString();
  } finally {
    await vfs.release(fh);
  }
}

describe('per-process attribution (a binding that names the caller)', () => {
  let fx: PolicyFixture;
  let svc: JournalService;
  afterEach(async () => {
    await svc?.close();
    await fx?.close();
    clearCallerCache();
  });

  it('journal records and /.ledgerfs/denials name the pid and its command line', async () => {
    fx = await policyFixture('roots:\n  - path: /work\n    mode: rw\n  - path: /ref\n    mode: ro\n', (src) => {
      fs.mkdirSync(path.join(src, 'work'));
      fs.mkdirSync(path.join(src, 'ref'));
    });
    svc = await JournalService.open({
      stateDir: path.join(fx.dir, 'state'), backend: fx.ws.backend, source: fx.src, session: 's', actor: 'run', role: 'test', log: silentLogger,
    });
    const vfs = svc.attachDirect(fx.ws.stages);
    const me: Caller = { uid: 0, gid: 0, pid: process.pid };
    // FUSE names the calling thread: another thread of this process is recorded as the process
    const tid = Number(fs.readdirSync('/proc/self/task').find((t) => Number(t) !== process.pid));
    expect(tid).toBeGreaterThan(0);
    const myThread: Caller = { pid: tid };
    const gone: Caller = { pid: 4_194_305 }; // above the kernel's pid_max: no such process
    const full = ownCommand();
    expect(full.length).toBeGreaterThan(0);
    // vitest's worker has a long command line: it is cut at 200 characters
    const own = full.length > 200 ? `${full.slice(0, 199)}…` : full;

    await writeAs(vfs, '/work/a.txt', 'hello', me);
    await vfs.mkdir('/work/d', 0o755, myThread);
    await vfs.rename('/work/a.txt', '/work/d/a.txt', gone);
    await vfs.unlink('/work/d/a.txt'); // no caller: nothing to attribute
    await expect(writeAs(vfs, '/ref/x.txt', 'no', me)).rejects.toMatchObject({ code: 'EROFS' });
    svc.writer.flush();

    const ops = svc.history().ops.map((o) => ({ op: o.op, pid: o.pid, cmd: o.cmd }));
    expect(ops).toEqual([
      { op: 'create', pid: process.pid, cmd: own },
      { op: 'mkdir', pid: process.pid, cmd: own }, // made by another thread: named as the process
      { op: 'rename', pid: 4_194_305, cmd: undefined },
      { op: 'unlink', pid: undefined, cmd: undefined },
    ]);
    const denials = await readAll(vfs, '/.ledgerfs/denials');
    const line = denials.trimEnd().split('\n').at(-1) ?? '';
    expect(line).toMatch(new RegExp(`^\\S+Z pid=${process.pid} create /ref/x.txt EROFS: .* \\[by .+\\]$`));
    expect(line.endsWith(` [by ${own}]`)).toBe(true);
  });

  it('quotes arguments like a shell, caches briefly, and knows nothing of a pid that is gone', async () => {
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 30000)', "it's a b"], { stdio: 'ignore' });
    try {
      await new Promise((r) => child.once('spawn', r));
      // the exec may not have replaced the forked image's command line yet
      const want = `${process.execPath} -e 'setTimeout(() => {}, 30000)' 'it'\\''s a b'`;
      const cmdOf = (pid: number | undefined) => callerProcess(pid)?.cmd;
      for (let i = 0; i < 100 && cmdOf(child.pid) !== want; i++) {
        clearCallerCache();
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(callerProcess(child.pid)).toEqual({ pid: child.pid, cmd: want });
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
      expect(cmdOf(child.pid)).toBe(want); // cached for a moment: the record names who it was
      clearCallerCache();
      expect(callerProcess(child.pid)).toEqual({ pid: child.pid }); // gone: the id alone
    } finally {
      child.kill('SIGKILL');
    }
    expect(callerProcess(undefined)).toBeUndefined();
  });
});

describe('caller command lines', () => {
  it('stay on one line: arguments with newlines or control characters take the $\'...\' form', async () => {
    const child = spawn('python3', ['-c', "import time\ntime.sleep(30) # it's\tdone"], { stdio: 'ignore' });
    try {
      // the child's cmdline is its own once exec has happened
      for (let i = 0; i < 100 && !fs.readFileSync(`/proc/${child.pid}/cmdline`, 'utf8').startsWith('python3'); i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      clearCallerCache();
      const who = callerProcess(child.pid);
      expect(who?.cmd?.endsWith("python3 -c $'import time\\ntime.sleep(30) # it\\'s\\tdone'"), who?.cmd).toBe(true);
      expect(who?.cmd).not.toMatch(/[\n\t]/);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
