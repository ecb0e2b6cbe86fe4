import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestJournal, vfsFs } from '../helpers/journal.js';
import { CLI } from '../helpers/mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * Every CLI process (and the tests start hundreds) would pay for the GCS client (about half a
 * second), prom-client, the YAML parser and the GCS emulator if they were imported at start;
 * they load on first use instead. A module resolve hook in the child lists every module the CLI
 * `import`s, and a preloaded script adds, at exit, every module it loaded by require() (zod and
 * the YAML parser are required on first use).
 * The CLI is a bundle (rolldown.config.mjs): the hook sees its chunks, not the modules in them. The
 * source map of each chunk names those modules (src/*.ts, and the packages bundled in), so a module
 * counts as loaded when a chunk holding it was; an unbundled build lists dist/*.js itself.
 */
describe('CLI start-up', () => {
  let dir: string;
  let register: string;
  let required: string;
  beforeAll(() => {
    dir = makeTemp('startup');
    const hook = path.join(dir, 'hook.mjs');
    fs.writeFileSync(hook, `import fs from 'node:fs';
export async function resolve(spec, ctx, next) {
  const r = await next(spec, ctx);
  fs.appendFileSync(${JSON.stringify(path.join(dir, 'loaded.txt'))}, r.url + '\\n');
  return r;
}
`);
    register = path.join(dir, 'register.mjs');
    fs.writeFileSync(register, `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hook).href)});\n`);
    required = path.join(dir, 'required.cjs');
    fs.writeFileSync(required, `process.on('exit', () => {
  require('node:fs').appendFileSync(${JSON.stringify(path.join(dir, 'loaded.txt'))}, Object.keys(require.cache).map((f) => require('node:url').pathToFileURL(f).href + '\\n').join(''));
});
`);
  });
  afterAll(() => rmTemp(dir));

  function loadedBy(args: string[]): string[] {
    const out = path.join(dir, 'loaded.txt');
    fs.rmSync(out, { force: true });
    execFileSync(process.execPath, ['--import', register, '--require', required, CLI, ...args], { stdio: 'pipe', encoding: 'utf8' });
    const urls = [...new Set(fs.readFileSync(out, 'utf8').split('\n').filter(Boolean))];
    return [...urls, ...urls.flatMap(bundled)];
  }

  /** The modules a chunk of the CLI bundle holds, as file URLs (from its source map). */
  function bundled(url: string): string[] {
    if (!url.startsWith('file:')) return [];
    const file = fileURLToPath(url);
    if (!/\/dist\/cli\/(main|bundle-[^/]+)\.js$/.test(file) || !fs.existsSync(`${file}.map`)) return [];
    const map = JSON.parse(fs.readFileSync(`${file}.map`, 'utf8')) as { sources: string[] };
    return map.sources.map((s) => pathToFileURL(path.resolve(path.dirname(file), s)).href);
  }

  it('`ledgerfs log --help` loads neither the GCS client, prom-client, the YAML parser nor the emulator', () => {
    const loaded = loadedBy(['log', '--help']);
    // the hook sees the CLI's own modules (src/ through the bundle's map, dist/ unbundled): it works
    expect(loaded.some((u) => /\/(src|dist)\/cli\/log-command\.(ts|js)$/.test(u))).toBe(true);
    // (the upload spool's reader is plain node: status and unmount --no-wait read it)
    const heavy = (u: string) => /\/(src|dist)\/backend\/(gcs\/|gcs\.|gcs-stack\.)/.test(u) && !/\/backend\/gcs\/spool-log\.(ts|js)$/.test(u);
    expect(loaded.filter((u) => /node_modules\/(@google-cloud\/storage|prom-client|yaml)\//.test(u) || /\/(src|dist)\/dev\//.test(u) || heavy(u))).toEqual([]);
  });

  // zod is about 850 kB of JavaScript: only a mount file or a journal record needs it; jsdiff only a diff
  it('`ledgerfs --version` and `ledgerfs log --help` load neither zod nor jsdiff', () => {
    const zod = (u: string) => /\/node_modules\/(zod|diff)\//.test(u);
    for (const args of [['--version'], ['log', '--help']]) {
      const loaded = loadedBy(args);
      expect(loaded.some((u) => u.includes('/node_modules/commander/'))).toBe(true);
      expect(loaded.filter(zod), args.join(' ')).toEqual([]);
    }
  });

  it('a journal record read from disk is still validated: `ledgerfs log` on a journal loads zod', async () => {
    const src = path.join(dir, 'src');
    const state = path.join(dir, 'state');
    fs.mkdirSync(src);
    const j = await openTestJournal(src, state);
    await vfsFs.write(j.vfs, '/a.txt', 'one');
    await j.close();
    const loaded = loadedBy(['log', '--state', state]);
    expect(loaded.some((u) => u.includes('/node_modules/zod/'))).toBe(true);
  });
});
