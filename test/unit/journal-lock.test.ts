import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { JournalLock } from '../../src/journal/lock.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

describe('journal lock', () => {
  let dir: string;
  beforeEach(() => {
    dir = makeTemp('lock');
  });
  afterEach(() => rmTemp(dir));

  it('a holder killed but not yet reaped (a zombie) holds nothing: the next mount takes the lock', async () => {
    // bash starts the holder in the background, then becomes `sleep`, which never reaps it
    const parent = spawn('bash', ['-c', 'sleep 60 & echo $!; exec sleep 30'], { stdio: ['ignore', 'pipe', 'ignore'] });
    try {
      const pid = Number(await new Promise<string>((resolve) => parent.stdout.once('data', (d: Buffer) => resolve(d.toString().trim()))));
      const file = path.join(dir, 'lock');
      const start = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      fs.writeFileSync(file, JSON.stringify({ pid, role: 'mount /x', since: new Date().toISOString(), start: start.slice(start.lastIndexOf(')') + 2).split(' ')[19] }));
      expect(JournalLock.liveHolder(file)?.pid).toBe(pid);
      // bash would reap it: kill it only once bash has become sleep (which never reaps)
      for (let i = 0; i < 250 && fs.readFileSync(`/proc/${parent.pid}/comm`, 'utf8').trim() !== 'sleep'; i++) execFileSync('sleep', ['0.02']);
      process.kill(pid, 'SIGKILL');
      for (let i = 0; i < 100 && !fs.readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z'); i++) execFileSync('sleep', ['0.02']);
      expect(JournalLock.liveHolder(file)).toBeNull();
      const lock = JournalLock.acquire(file, 'mount /y');
      lock.release();
    } finally {
      parent.kill('SIGKILL');
    }
  });
});
