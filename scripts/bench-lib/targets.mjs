// The columns of the bench: what a workload runs on. A target turns a source directory into a
// path to run the workload in ("mount"), and undoes that ("stop"). To add a column (rclone,
// libfuse3's passthrough_ll, ledgerfs with other flags), add an entry to makeTargets() - for any
// FUSE daemon that stays in the foreground, daemonTarget() does the whole lifecycle - or pass
// --add-peer 'NAME=COMMAND {src} {mnt}' on the command line.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BenchError, mountAt, pidAlive, say, sleep, unmountSync, warn, which } from './util.mjs';

/**
 * @typedef {object} MountHandle
 * @property {string} path   where the workload runs
 * @property {number|null} pid  the daemon serving it (null for the plain directory)
 * @property {() => Promise<void>} stop  unmount and end the daemon; idempotent
 *
 * @typedef {object} Target
 * @property {string} name     column name (also what --peers selects)
 * @property {string} describe one line for the report header
 * @property {boolean} fuse    false only for the plain directory
 * @property {() => string|null} problem  why it cannot run here (null when it can)
 * @property {(src: string, mnt: string, logDir: string) => Promise<MountHandle>} mount
 */

/** Every daemon we started that may still hold a mount: emergency cleanup walks this. */
const live = new Map(); // mnt -> { pid, name }

/** Synchronous last-resort cleanup (signals, crashes, process exit): unmount by path, kill by PID. */
export function cleanupAllSync() {
  for (const [mnt, { pid }] of live) {
    if (mountAt(mnt) && !unmountSync(mnt)) unmountSync(mnt, true);
    if (pid && pidAlive(pid)) {
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        /* gone */
      }
    }
  }
  // Give daemons a moment to exit on SIGTERM, then make sure they are gone.
  const deadline = Date.now() + 3000;
  for (const [, { pid }] of live) {
    while (pid && pidAlive(pid) && Date.now() < deadline) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    if (pid && pidAlive(pid)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
  }
  live.clear();
}

export function liveMounts() {
  return [...live.keys()];
}

export function plainTarget() {
  return {
    name: 'plain',
    describe: 'the source directory itself, no FUSE (the limit)',
    fuse: false,
    problem: () => null,
    async mount(src) {
      return { path: src, pid: null, stop: async () => {} };
    },
  };
}

/**
 * A FUSE daemon that runs in the foreground until SIGTERM: spawn it, wait for the mount to show
 * up in /proc/self/mountinfo, and on stop() SIGTERM it, wait, then unmount by path (-u, then
 * -uz) and SIGKILL only this PID if it still lingers.
 * @param {{name: string, describe: string, argv: (src: string, mnt: string) => string[],
 *          problem?: () => string|null, env?: object, attempts?: number,
 *          subdir?: (src: string) => string}} spec  subdir: where in the mount the source shows
 * @returns {Target}
 */
export function daemonTarget(spec) {
  const attempts = spec.attempts ?? 3;
  return {
    name: spec.name,
    describe: spec.describe,
    fuse: true,
    problem: spec.problem ?? (() => null),
    async mount(src, mnt, logDir) {
      let lastErr;
      for (let i = 1; i <= attempts; i++) {
        try {
          return await startDaemon(spec, src, mnt, logDir);
        } catch (err) {
          lastErr = err;
          if (i < attempts) {
            warn(`${spec.name}: mount attempt ${i} failed (${err.message.split('\n')[0]}); retrying in 3 s`);
            await sleep(3000);
          }
        }
      }
      throw lastErr;
    },
  };
}

async function startDaemon(spec, src, mnt, logDir) {
  fs.mkdirSync(mnt, { recursive: true });
  if (mountAt(mnt)) throw new BenchError(`${mnt} is already a mount point`);
  if (fs.readdirSync(mnt).length) throw new BenchError(`${mnt} is not empty`);
  const argv = spec.argv(src, mnt);
  const logFile = path.join(logDir, `${spec.name}.log`);
  const logFd = fs.openSync(logFile, 'a');
  fs.writeSync(logFd, `\n=== ${new Date().toISOString()} ${argv.join(' ')}\n`);
  const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', logFd, logFd], env: { ...process.env, ...spec.env } });
  fs.closeSync(logFd);
  const pid = child.pid;
  let exited = null;
  const exitP = new Promise((r) => child.on('exit', (code, sig) => r((exited = { code, sig }))));
  child.on('error', (e) => (exited = { code: -1, sig: null, error: e }));
  if (pid) live.set(mnt, { pid, name: spec.name });

  const tail = () => {
    try {
      return fs.readFileSync(logFile, 'utf8').split('\n').slice(-15).join('\n');
    } catch {
      return '';
    }
  };
  const stop = async () => {
    if (!live.has(mnt) && !mountAt(mnt)) return;
    if (!exited && pid) child.kill('SIGTERM');
    await Promise.race([exitP, sleep(10_000)]);
    if (mountAt(mnt) && !unmountSync(mnt)) {
      warn(`${spec.name}: ${mnt} still busy after SIGTERM; detaching lazily`);
      unmountSync(mnt, true);
    }
    if (!exited && pid) {
      await Promise.race([exitP, sleep(3000)]);
      if (!exited) {
        warn(`${spec.name}: daemon ${pid} did not exit; SIGKILL`);
        child.kill('SIGKILL');
        await Promise.race([exitP, sleep(3000)]);
      }
    }
    live.delete(mnt);
  };

  const deadline = Date.now() + 30_000;
  for (;;) {
    const m = mountAt(mnt);
    if (m && /fuse/.test(m.fstype)) {
      try {
        fs.statSync(mnt); // answers requests
        return { path: spec.subdir ? path.join(mnt, spec.subdir(src)) : mnt, pid, stop, logFile, mountOptions: m.options };
      } catch (e) {
        await stop();
        throw new BenchError(`${spec.name}: mounted but not answering (${e.code}); log:\n${tail()}`);
      }
    }
    if (exited) {
      live.delete(mnt);
      const why = exited.error ? exited.error.message : exited.sig ? `killed by ${exited.sig}` : `exit ${exited.code}`;
      throw new BenchError(`${spec.name}: daemon ended before mounting (${why}); log ${logFile}:\n${tail()}`);
    }
    if (Date.now() > deadline) {
      await stop();
      throw new BenchError(`${spec.name}: no mount at ${mnt} after 30 s; log:\n${tail()}`);
    }
    await sleep(20);
  }
}

let mountHelp;
/** Does this build's `ledgerfs mount` know `flag`? (flags appear while the bench stays the same) */
function ledgerfsHas(cli, flag) {
  if (mountHelp === undefined) {
    try {
      mountHelp = execFileSync(process.execPath, [cli, 'mount', '--help'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    } catch {
      mountHelp = '';
    }
  }
  return mountHelp.includes(flag);
}

/**
 * ledgerfs with default options plus `fixedArgs` and --ledgerfs-args. The journal (--state) goes
 * to a directory inside the mount point's parent work dir, so a run leaves nothing behind in
 * ~/.local/state; that directory is on the same file system as the default one.
 */
function ledgerfsTarget(name, fixedArgs, opts, repo) {
  const cli = path.join(repo, 'bin', 'ledgerfs.js');
  const extra = [fixedArgs, opts.ledgerfsArgs ?? ''].filter(Boolean).join(' ');
  return daemonTarget({
    name,
    describe: `node bin/ledgerfs.js mount --source SRC ${extra} MNT`.replace(/\s+MNT/, ' MNT'),
    problem: () => {
      if (!fs.existsSync(path.join(repo, 'dist', 'cli', 'main.js'))) return `ledgerfs is not built (${repo}/dist missing): run npm run build`;
      for (const f of splitArgs(fixedArgs)) if (!ledgerfsHas(cli, f)) return `this ledgerfs build has no ${f} flag`;
      if (/--binding native-ll/.test(fixedArgs) && !fs.existsSync(path.join(repo, 'native', 'build', 'Release', 'ledgerfs_fuse3_ll.node'))) {
        return 'the native-ll binding is not built: node scripts/build-native.mjs (apt-get install -y libfuse3-dev)';
      }
      return null;
    },
    argv: (src, mnt) => {
      const state = ledgerfsHas(cli, '--state') ? ['--state', path.join(path.dirname(path.dirname(mnt)), 'state', `${name}-${path.basename(mnt)}`)] : [];
      // every column mounts the same source tree at once: a build that refuses a second journaled
      // mount of one source is told this is on purpose
      const shared = ledgerfsHas(cli, '--shared-source') ? ['--shared-source'] : [];
      return [process.execPath, cli, 'mount', '--source', src, ...state, ...shared, ...splitArgs(fixedArgs), ...splitArgs(opts.ledgerfsArgs), mnt];
    },
  });
}

/*
 * libfuse3's own example file systems, compiled from the sources Debian's libfuse3-dev ships, at
 * bench time (cached by source mtime): the C peers on the library the native binding uses.
 */
const FUSE3_EXAMPLES = '/usr/share/doc/libfuse3-dev/examples';
const fuse3Built = new Map(); // example -> binary path or Error

function buildFuse3Example(example) {
  if (fuse3Built.has(example)) return fuse3Built.get(example);
  let result;
  const source = path.join(FUSE3_EXAMPLES, `${example}.c`);
  const bin = path.join(os.tmpdir(), 'ledgerfs-bench-bin', example);
  try {
    if (!fs.existsSync(source)) throw new Error(`${source} is missing (apt-get install -y libfuse3-dev)`);
    if (!which('cc') || !which('pkg-config')) throw new Error('cc / pkg-config missing (apt-get install -y build-essential pkg-config)');
    if (!fs.existsSync(bin) || fs.statSync(bin).mtimeMs < fs.statSync(source).mtimeMs) {
      fs.mkdirSync(path.dirname(bin), { recursive: true });
      const flags = execFileSync('pkg-config', ['--cflags', '--libs', 'fuse3'], { encoding: 'utf8' }).trim().split(/\s+/);
      // the features Debian's build of the examples has (their config.h is not shipped)
      const have = ['HAVE_UTIMENSAT', 'HAVE_POSIX_FALLOCATE', 'HAVE_SETXATTR', 'HAVE_COPY_FILE_RANGE'].map((d) => `-D${d}`);
      execFileSync('cc', ['-O2', ...have, '-o', bin, source, ...flags], { stdio: ['ignore', 'ignore', 'pipe'] });
    }
    result = bin;
  } catch (err) {
    result = new Error(`cannot build libfuse3's ${example}.c: ${(err.stderr?.toString() || err.message).trim().split('\n')[0]}`);
  }
  fuse3Built.set(example, result);
  return result;
}

function fuse3ExampleTarget(name, example, describe, argv, subdir) {
  return daemonTarget({
    name,
    describe,
    subdir,
    problem: () => {
      const b = buildFuse3Example(example);
      return b instanceof Error ? b.message : null;
    },
    argv: (src, mnt) => argv(buildFuse3Example(example), src, mnt),
  });
}

function splitArgs(s) {
  return (s ?? '').trim() ? s.trim().split(/\s+/) : [];
}

/** The catalogue of columns. Order here is the order in the table. */
export function makeTargets(opts) {
  const repo = opts.repo;
  const targets = [
    plainTarget(),
    daemonTarget({
      name: 'bindfs',
      // bindfs 1.14 on libfuse2 (Debian 12): single-threaded (-s), use_ino, default_permissions,
      // libfuse2 default timeouts (entry 1 s, attr 1 s, negative 0, same as ledgerfs's defaults),
      // no big_writes unless asked for with --bindfs-args '-o big_writes'.
      describe: `bindfs -f --no-allow-other ${opts.bindfsArgs ?? ''} (C, libfuse2, default options)`.replace(/\s+\(/, ' ('),
      problem: () => (which('bindfs') ? null : 'bindfs is not installed (apt-get install -y bindfs)'),
      argv: (src, mnt) => ['bindfs', '-f', '--no-allow-other', ...splitArgs(opts.bindfsArgs), src, mnt],
    }),
    // libfuse3's high-level passthrough example (same API level as ledgerfs's native binding):
    // serves all of /, so the workload runs in MNT/SRC; multithreaded; its init() sets entry,
    // attr and negative timeouts to 0 and use_ino.
    fuse3ExampleTarget('libfuse3', 'passthrough',
      'passthrough -f (C, libfuse3 high-level example, compiled here; timeouts 0, multithreaded)',
      (bin, _src, mnt) => [bin, '-f', mnt], (src) => src),
    // the low-level one, not in the default --peers
    fuse3ExampleTarget('libfuse3-ll', 'passthrough_ll',
      'passthrough_ll -f -o source=SRC (C, libfuse3 low-level example, compiled here; cache=normal)',
      (bin, src, mnt) => [bin, '-f', '-o', `source=${src}`, mnt]),
    ledgerfsTarget('ledgerfs', '', opts, repo),
    // the libfuse2 fallback: issue 7's bar is that the default binding is never slower
    ledgerfsTarget('ledgerfs-fuse-native', '--binding fuse-native', opts, repo),
    // not in the default --peers: the default binding named explicitly
    ledgerfsTarget('ledgerfs-native-ll', '--binding native-ll', opts, repo),
    // Not in the default --peers: the journal's cost is ledgerfs/ledgerfs-nojournal with
    // --peers ledgerfs-nojournal,ledgerfs (or add it to the default list).
    ledgerfsTarget('ledgerfs-nojournal', '--no-journal', opts, repo),
  ];
  for (const spec of opts.addPeers ?? []) {
    const eq = spec.indexOf('=');
    if (eq <= 0) throw new BenchError(`--add-peer wants NAME=COMMAND, got ${JSON.stringify(spec)}`);
    const name = spec.slice(0, eq);
    const cmd = spec.slice(eq + 1);
    if (!cmd.includes('{mnt}')) throw new BenchError(`--add-peer ${name}: the command must contain {mnt} (and usually {src})`);
    targets.push(
      daemonTarget({
        name,
        describe: cmd,
        // exec: the PID we hold is the daemon's, not a shell's. The daemon must stay in the foreground.
        argv: (src, mnt) => {
          const state = path.join(path.dirname(path.dirname(mnt)), 'state', name);
          const line = cmd.replaceAll('{src}', `'${src}'`).replaceAll('{mnt}', `'${mnt}'`).replaceAll('{state}', `'${state}'`);
          return ['/bin/sh', '-c', `exec ${line}`];
        },
      }),
    );
  }
  return targets;
}

export function reportLiveMounts() {
  for (const m of liveMounts()) say(`  still mounted: ${m}`);
}
