import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

/*
 * The daemon logs to stderr. When stderr is a pipe or socket whose reader stopped reading (a
 * stalled supervisor, a parent that never reads), a synchronous write blocks the daemon's only JS
 * thread and every program on the mount waits with it. The logger must drop lines instead.
 * These run a child that logs 8 MiB through the real logger (dist/, as the daemon does).
 */
const dist = path.resolve('dist/core/index.js');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ledgerfs-logpipe-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

function childScript(lines: number, marker: string): string {
  const file = path.join(tmp, `child-${lines}-${path.basename(marker)}.mjs`);
  fs.writeFileSync(
    file,
    `import fs from 'node:fs';
const { createLogger, flushLogs } = await import(${JSON.stringify(dist)});
const log = createLogger('info', 'ledgerfs', { format: 'json' });
const pad = 'x'.repeat(200);
for (let i = 0; i < ${lines}; i++) log.info({ i, pad }, 'line');
fs.writeFileSync(${JSON.stringify(marker)}, 'logged');
await flushLogs(1000);
`,
  );
  return file;
}

/** Runs `cmd`, resolves its exit code, or 'hung' after `ms` (and kills it). */
function exitOf(cmd: string, args: string[], ms: number, stderr: 'pipe' | 'inherit' = 'pipe'): Promise<number | 'hung'> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', stderr] });
    // the test never reads child.stderr: once the socket's buffers fill, the writer would block
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      resolve('hung');
    }, ms);
    child.on('exit', (code) => {
      clearTimeout(timer);
      child.stderr?.destroy();
      resolve(code ?? -1);
    });
  });
}

describe('logging to a pipe nobody reads', () => {
  it('a FIFO whose reader never reads: the process goes on and exits', async () => {
    const marker = path.join(tmp, 'fifo-marker');
    const script = childScript(40_000, marker);
    // stderr is a pipe into `sleep`, which never reads it
    const sleeper = path.join(tmp, 'sleeper.pid');
    const code = await exitOf('bash', ['-c', `exec 2> >(exec sleep 60); echo $! > ${sleeper}; exec ${JSON.stringify(process.execPath)} ${JSON.stringify(script)}`], 30_000, 'inherit');
    try {
      process.kill(Number(fs.readFileSync(sleeper, 'utf8')), 'SIGKILL');
    } catch {
      /* gone already */
    }
    expect(code).toBe(0);
    expect(fs.readFileSync(marker, 'utf8')).toBe('logged');
  }, 40_000);

  it('a socket (a Node parent\'s stderr pipe) never read: the process goes on and exits', async () => {
    const marker = path.join(tmp, 'socket-marker');
    const code = await exitOf(process.execPath, [childScript(40_000, marker)], 30_000);
    expect(code).toBe(0);
    expect(fs.readFileSync(marker, 'utf8')).toBe('logged');
  }, 40_000);

  it('a reader that reads gets every line, in order, the last ones too', async () => {
    const marker = path.join(tmp, 'read-marker');
    const child = spawn(process.execPath, [childScript(3_000, marker)], { stdio: ['ignore', 'ignore', 'pipe'] });
    let out = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
    await new Promise((r) => child.on('exit', r));
    const seen = out.trim().split('\n').map((l) => (JSON.parse(l) as { i: number }).i);
    expect(seen).toEqual(Array.from({ length: 3_000 }, (_, i) => i));
  }, 40_000);
});
