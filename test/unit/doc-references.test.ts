import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { BINDING_NAMES } from '../../src/config/defaults.js';
import { buildProgram } from '../../src/cli/main.js';

/*
 * Issue 16: stale references. What the documents name must be in the repository (a reader of a
 * fresh clone has nothing beside it), and what --help lists must be what the code takes.
 */

const REPO = path.resolve(import.meta.dirname, '../..');
const DOCS = ['README.md', 'native/README.md', ...fs.readdirSync(path.join(REPO, 'docs')).filter((n) => n.endsWith('.md')).map((n) => `docs/${n}`)];

describe('documents name only what a fresh clone has', () => {
  it.each(DOCS)('%s: no path outside the repository', (doc) => {
    const text = fs.readFileSync(path.join(REPO, doc), 'utf8');
    // a relative path climbing out of the repository (../x from the root, ../../x from native/ or docs/)
    const depth = doc.split('/').length - 1;
    const climbs = [...text.matchAll(/(?:^|[\s`(\[])((?:\.\.\/)+)[\w.-]/g)].filter((m) => (m[1] as string).length / 3 > depth);
    expect(climbs.map((m) => text.slice(Math.max(0, (m.index ?? 0) - 30), (m.index ?? 0) + 50))).toEqual([]);
    expect(text).not.toMatch(/\/work\/|\/home\/\w+\//);
  });

  it.each(DOCS)('%s: every repository path in backquotes exists', (doc) => {
    const text = fs.readFileSync(path.join(REPO, doc), 'utf8');
    const missing = [...text.matchAll(/`((?:src|test|scripts|native|docs|bin|patches)\/[^`\s*]+?)[.,:;]?`/g)]
      .map((m) => (m[1] as string).replace(/[#:].*$/, ''))
      .filter((p) => !fs.existsSync(path.join(REPO, p)) && !p.startsWith('native/build/'));
    expect(missing).toEqual([]);
  });

  it('README: GCS is not "soon", and mount --help lists exactly the bindings the code has', () => {
    const readme = fs.readFileSync(path.join(REPO, 'README.md'), 'utf8');
    expect(readme).not.toMatch(/GCS[^.\n]{0,40}soon|soon[^.\n]{0,40}GCS/i);
    const mount = buildProgram().commands.find((c) => c.name() === 'mount');
    const help = mount?.helpInformation() ?? '';
    for (const b of BINDING_NAMES) expect(help).toContain(b);
    const said = [...help.replace(/\s+/g, ' ').matchAll(/binding: (.*?)default/g)].map((m) => m[1]).join(' ');
    expect(said.match(/\b(native-ll|fuse-native|native)\b(?!\/)/g)?.filter((x, i, a) => a.indexOf(x) === i).sort()).toEqual([...BINDING_NAMES].sort());
  });
});
