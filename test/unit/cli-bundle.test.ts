import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { SourceMap } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * `npm run build` is tsc, then rolldown.config.mjs bundles dist/cli/main.js (start-up CPU of every
 * ledgerfs process). A build that skips the second step (a bare tsc) still works, only slower, so
 * nothing else would notice it: these tests do.
 */
const REPO = path.resolve(import.meta.dirname, '../..');
const CLI_DIR = path.join(REPO, 'dist/cli');
const MAIN = path.join(CLI_DIR, 'main.js');

describe('the CLI bundle (dist/cli/main.js)', () => {
  let dir: string;
  beforeAll(() => {
    dir = makeTemp('cli-bundle');
  });
  afterAll(() => rmTemp(dir));

  it('is the bundle: `ledgerfs --version` loads no dist/ module but main.js and its chunks', () => {
    // a resolve hook in the child lists every module the CLI imports
    const out = path.join(dir, 'loaded.txt');
    const hook = path.join(dir, 'hook.mjs');
    fs.writeFileSync(hook, `import fs from 'node:fs';
export async function resolve(spec, ctx, next) {
  const r = await next(spec, ctx);
  fs.appendFileSync(${JSON.stringify(out)}, r.url + '\\n');
  return r;
}
`);
    const register = path.join(dir, 'register.mjs');
    fs.writeFileSync(register, `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hook).href)});\n`);
    execFileSync(process.execPath, ['--import', register, CLI, '--version'], { stdio: 'pipe' });
    const ofDist = fs
      .readFileSync(out, 'utf8')
      .split('\n')
      .filter((u) => u.startsWith('file:'))
      .map((u) => fileURLToPath(u))
      .filter((f) => f.startsWith(path.join(REPO, 'dist') + path.sep));
    expect(ofDist).toContain(MAIN);
    // the bundle imports its shared chunks (the hook works)...
    expect(ofDist.length).toBeGreaterThan(1);
    // ...and nothing tsc wrote one module at a time (dist/journal/*.js, dist/cli/log-command.js, ...)
    const notBundle = ofDist.filter((f) => f !== MAIN && !(path.dirname(f) === CLI_DIR && path.basename(f).startsWith('bundle-')));
    expect(notBundle, 'dist/cli/main.js is not the bundle: run npm run build (tsc, then rolldown)').toEqual([]);
  });

  it("loads what it loads on use (the GCS stack, metrics, the emulator) from the bundle's own chunks, which exist", () => {
    const chunks = fs.readdirSync(CLI_DIR).filter((f) => f.startsWith('bundle-') && f.endsWith('.js'));
    const lazy = new Set<string>();
    for (const f of ['main.js', ...chunks]) {
      for (const line of fs.readFileSync(path.join(CLI_DIR, f), 'utf8').split('\n')) {
        // (bundled JSDoc comments hold `import("./argument.js")` types too)
        if (/^\s*(\*|\/\/|\/\*)/.test(line)) continue;
        for (const m of line.matchAll(/\bimport\("(\.[^"]+)"\)/g)) lazy.add(m[1]!);
      }
    }
    expect(lazy.size).toBeGreaterThanOrEqual(3);
    for (const spec of lazy) {
      expect(spec, 'a dynamic import that is not a chunk of the bundle').toMatch(/^\.\/bundle-[^/]+\.js$/);
      expect(fs.existsSync(path.join(CLI_DIR, spec)), `${spec} is missing`).toBe(true);
    }
  });

  it('has a source map that names the line of src/ a line of the bundle came from', () => {
    const map = new SourceMap(JSON.parse(fs.readFileSync(`${MAIN}.map`, 'utf8')));
    // one line of src/cli/main.ts, found by what it holds, in the bundle and in the source
    const needle = '../../package.json';
    const lineOf = (file: string) => fs.readFileSync(file, 'utf8').split('\n').findIndex((l) => l.includes(needle));
    const src = path.join(REPO, 'src/cli/main.ts');
    const bundleLine = lineOf(MAIN);
    expect(bundleLine).toBeGreaterThan(0);
    const col = fs.readFileSync(MAIN, 'utf8').split('\n')[bundleLine]!.indexOf(needle);
    const e = map.findEntry(bundleLine, col) as { originalSource?: string; originalLine?: number };
    const original = e.originalSource!.startsWith('file:') ? fileURLToPath(e.originalSource!) : path.resolve(CLI_DIR, e.originalSource!);
    expect(original).toBe(src);
    expect(e.originalLine).toBe(lineOf(src));
  });
});
