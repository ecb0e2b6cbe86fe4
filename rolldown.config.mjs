// The second half of `npm run build` (after tsc): dist/cli/main.js becomes one bundle of the CLI.
//
// Why: every ledgerfs process (the tests start hundreds: each mount, each CLI call) paid for Node's
// ES-module loader resolving, reading and linking about 200 dist/ modules one by one; that was
// most of its start-up CPU once zod and jsdiff load lazily. Bundled, measured 2026-11-26 against
// the unbundled build of the same commit (3 pairs, alternating, medians; a loaded 2-core host):
// `ledgerfs --version` 204 -> 137 ms CPU; `mount --daemon` until ready 490 -> 360 ms CPU (the
// daemon 220 -> 150, the command that waits for it 270 -> 200); the CPU of a slice of the test
// suite (test/cli, test/mount/posix, test/mount/journal) 62.5 -> 48.4 s, its wall time unchanged
// within the host's noise (106 -> 100 s: the slice mostly waits).
//
// What stays as it was, on purpose:
// - The input is tsc's output (tsc stays the only compiler and the type check); the bundle
//   overwrites dist/cli/main.js, so bin/ledgerfs.js and bin/mount-helper.js need no change, and
//   a bare `tsc` afterwards leaves a slower but correct unbundled CLI, never a stale bundle.
// - Every chunk is written to dist/cli/, two levels below the repository like the files it came
//   from, so the paths made from import.meta.url (the native addons, bin/ledgerfs.js that the
//   daemon re-executes, package.json) resolve as before.
// - `await import()`s stay separate chunks (the GCS stack, metrics, the emulator): loaded on use.
// - The GCS client, prom-client and fuse-native stay in node_modules (external), and so do zod,
//   jsdiff and yaml, which the code require()s on first use (the bundler leaves require() alone).
// - Other dist/ files (the GCS emulator's dist/dev/gcs-emulator/main.js, dist/config/defaults.js
//   that scripts/test imports, modules the benches import) stay as tsc wrote them.
// - Source maps: tsc's maps are read back in (readTscMap), so the bundle's .map names src/*.ts.
//   Node applies them only with NODE_OPTIONS=--enable-source-maps, not on by default: it cost
//   10-20 ms more CPU per `--version` (3 alternating rounds of 20 runs). A user-facing error is a
//   sentence either way; the map matters for a crash's stack trace.
import fs from 'node:fs';
import path from 'node:path';

const CLI_DIR = path.resolve(import.meta.dirname, 'dist/cli');
const ENTRY = path.join(CLI_DIR, 'main.js');
// the bundle's first line: tells a bundle from tsc's main.js
const BANNER = '// ledgerfs CLI bundle (rolldown.config.mjs); tsc output bundled, see npm run build';
// chunks carry this prefix so a build can remove the previous build's (their names hold hashes)
const CHUNK_PREFIX = 'bundle-';

const entry = fs.readFileSync(ENTRY, 'utf8');
if (entry.startsWith(BANNER)) {
  // bundling the bundle would import chunks this build is about to delete
  throw new Error('dist/cli/main.js is already the bundle: run tsc first (npm run build does both)');
}

/** Feeds tsc's source map of each dist/ file to the bundler, which chains it: the bundle's map names src/. */
const readTscMap = {
  name: 'read-tsc-source-maps',
  load(id) {
    if (!id.endsWith('.js') || !fs.existsSync(`${id}.map`) || id.includes(`${path.sep}node_modules${path.sep}`)) return null;
    return { code: fs.readFileSync(id, 'utf8'), map: fs.readFileSync(`${id}.map`, 'utf8') };
  },
};

/**
 * Removes the chunks of earlier builds once this one is written. Not before: chunk names hash their
 * contents, so a rebuild of the same source rewrites the same files, and a CLI started meanwhile
 * (another vitest run in this checkout, whose global setup builds too) never finds one missing.
 */
const removeStaleChunks = {
  name: 'remove-stale-chunks',
  writeBundle(_options, bundle) {
    for (const f of fs.readdirSync(CLI_DIR)) {
      const chunk = f.replace(/\.map$/, '');
      if (f.startsWith(CHUNK_PREFIX) && !(chunk in bundle)) fs.rmSync(path.join(CLI_DIR, f), { force: true });
    }
  },
};

export default {
  input: ENTRY,
  platform: 'node',
  external: ['@google-cloud/storage', 'prom-client', 'fuse-native'],
  plugins: [readTscMap, removeStaleChunks],
  logLevel: 'warn',
  output: {
    dir: CLI_DIR,
    format: 'esm',
    entryFileNames: 'main.js',
    chunkFileNames: `${CHUNK_PREFIX}[name]-[hash].js`,
    banner: BANNER,
    sourcemap: true,
    // the sources are in src/ (tsc's maps carry no contents either)
    sourcemapExcludeSources: true,
  },
};
