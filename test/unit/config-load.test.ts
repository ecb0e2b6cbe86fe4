import { describe, expect, it } from 'vitest';
import { ConfigError, parseMountFile } from '../../src/config/load.js';
import { formatSize, parseSize } from '../../src/config/sizes.js';
import { SECRET_GLOBS } from '../../src/config/defaults.js';

const CASE = `
backend: { type: local, path: ./workspace }
roots:
  - path: /projects/Wilson-MVA
    mode: rw
    quota: { bytes: 50MiB, files: 1000 }
    maxFileBytes: 20MiB
    suffixes: [.pdf, .md, .txt, .docx, .json]
  - path: /Tools
    mode: ro
hide: ["**/.env", "**/*.pem"]
`;

function errorOf(text: string): string {
  try {
    parseMountFile(text, 'case.yaml', '/cases');
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected a ConfigError');
}

describe('sizes', () => {
  it.each([
    ['1024', 1024], [1024, 1024], ['50MiB', 50 * 1024 ** 2], ['50 mib', 50 * 1024 ** 2], ['2GB', 2e9], ['2GiB', 2 * 1024 ** 3],
    ['512K', 512 * 1024], ['1.5KiB', 1536], ['10B', 10], ['1TB', 1e12],
  ])('%s is %d bytes', (input, bytes) => {
    expect(parseSize(input)).toBe(bytes);
  });
  it.each([['-1'], ['5 parsecs'], [''], [1.5], [-3], [true], ['MiB']])('%s is refused with a reason', (input) => {
    const r = parseSize(input);
    expect(typeof r).toBe('object');
    expect((r as { error: string }).error).toMatch(/expected/);
  });
  it('formats sizes for people', () => {
    expect(formatSize(50 * 1024 ** 2)).toBe('50 MiB');
    expect(formatSize(1536)).toBe('1.5 KiB');
    expect(formatSize(12)).toBe('12 B');
  });
});

describe('mount file', () => {
  it('accepts the case file as written and resolves the backend against its directory', () => {
    const c = parseMountFile(CASE, 'case.yaml', '/cases');
    expect(c.backend).toEqual({ type: 'local', path: '/cases/workspace' });
    expect(c.roots).toEqual([
      {
        path: '/projects/Wilson-MVA', source: '/projects/Wilson-MVA', mode: 'rw', quota: { bytes: 52428800, files: 1000 },
        maxFileBytes: 20971520, suffixes: ['.pdf', '.md', '.txt', '.docx', '.json'], readonly: [], hide: [], limits: {},
      },
      { path: '/Tools', source: '/Tools', mode: 'ro', quota: {}, readonly: [], hide: [], limits: {} },
    ]);
    expect(c.hide).toEqual(['**/.env', '**/*.pem']);
  });

  it('accepts JSON too', () => {
    const c = parseMountFile(JSON.stringify({ backend: { type: 'local', path: '/w' }, roots: [{ path: '/a/', mode: 'rw' }] }), 'm.json', '/');
    expect(c.roots[0]?.path).toBe('/a');
  });

  it('names file, field and expectation for a bad enum value', () => {
    expect(errorOf(CASE.replace('mode: rw', 'mode: rwx'))).toBe('case.yaml: roots[0].mode: expected "ro" or "rw", got "rwx"');
  });

  it('names an unknown field, suggests the right one and lists the allowed ones', () => {
    const msg = errorOf(CASE.replace('maxFileBytes:', 'maxFileByte:'));
    expect(msg).toMatch(/^case\.yaml: roots\[0\]\.maxFileByte: unknown field \(did you mean "maxFileBytes"\?\); allowed here: path, source, mode, quota, maxFileBytes, suffixes, readonly, hide, limits$/);
  });

  it('reports bad sizes, suffixes, globs, paths and backends', () => {
    expect(errorOf(CASE.replace('50MiB', '50 parsecs'))).toMatch(/^case\.yaml: roots\[0\]\.quota\.bytes: expected a size like/);
    expect(errorOf(CASE.replace('.docx', 'docx'))).toMatch(/roots\[0\]\.suffixes\[3\]: expected a file name suffix starting with "\."/);
    expect(errorOf(CASE.replace('"**/*.pem"', '"a/[b"'))).toMatch(/hide\[1\]: glob "a\/\[b" has a "\[" without/);
    expect(errorOf(CASE.replace('path: /Tools', 'path: Tools'))).toMatch(/roots\[1\]\.path: expected an absolute path/);
    expect(errorOf(CASE.replace('type: local', 'type: s3'))).toBe('case.yaml: backend.type: expected "local" or "gcs", got "s3"');
    expect(errorOf(CASE.replace('{ type: local, path: ./workspace }', '{ type: local }'))).toBe('case.yaml: backend.path: expected a directory path, got nothing');
    expect(errorOf('roots: []\nbackend: {type: local, path: x}')).toBe('case.yaml: roots: expected at least 1 item');
    expect(errorOf('backend: {type: local, path: x}')).toBe('case.yaml: roots: missing (expected a list)');
    expect(errorOf('')).toMatch(/empty/);
    expect(errorOf('roots: [\n')).toMatch(/^case\.yaml:\d+:\d+: not valid YAML/);
  });

  it('refuses nested roots, overlapping sources and roots inside /.ledgerfs', () => {
    const base = 'backend: {type: local, path: x}\nroots:\n';
    expect(errorOf(base + '  - {path: /a}\n  - {path: /a/b}')).toMatch(/roots\[1\]\.path: \/a\/b and roots\[0\]\.path \/a are nested/);
    expect(errorOf(base + '  - {path: /a}\n  - {path: /b, source: /a/x}')).toMatch(/roots\[1\]\.source: backend path \/a\/x overlaps roots\[0\]/);
    expect(errorOf(base + '  - {path: /.ledgerfs/x}')).toMatch(/reserves/);
  });

  it('accepts a gcs backend and passes state and session through', () => {
    const c = parseMountFile(
      'backend: {type: gcs, bucket: b, prefix: p/, keyFile: k.json}\nroots: [{path: /a}]\nstate: ./st\nsession: run-1',
      'g.yaml', '/etc/lfs',
    );
    expect(c.backend).toEqual({ type: 'gcs', bucket: 'b', prefix: 'p/', keyFile: '/etc/lfs/k.json' });
    expect(c.state).toBe('/etc/lfs/st');
    expect(c.session).toBe('run-1');
  });

  it('defaults a root to read-only without mode, preset or defaults', () => {
    const c = parseMountFile('backend: {type: local, path: x}\nroots: [{path: /a}]', 'm.yaml', '/');
    expect(c.roots[0]?.mode).toBe('ro');
  });

  it('merges presets under the file, field by field', () => {
    const c = parseMountFile(
      `preset: sandboxed
backend: {type: local, path: x}
defaults: { quota: { files: 10 } }
roots:
  - {path: /a, mode: rw}
  - {path: /b, mode: rw, quota: {bytes: 1MiB}, maxFileBytes: unlimited}
  - {path: /c}
`,
      'm.yaml', '/',
    );
    const [a, b, cc] = c.roots;
    expect(a).toMatchObject({ mode: 'rw', quota: { bytes: 1024 ** 3, files: 10 }, maxFileBytes: 256 * 1024 ** 2 });
    expect(b?.quota).toEqual({ bytes: 1024 ** 2, files: 10 });
    expect(b?.maxFileBytes).toBeUndefined();
    expect(cc?.mode).toBe('ro');
    // limits bind writes: a read-only root inherits none, keeps only what it states itself
    expect(cc?.quota).toEqual({});
    expect(cc?.maxFileBytes).toBeUndefined();
    const ro = parseMountFile('preset: sandboxed\nbackend: {type: local, path: x}\nroots: [{path: /a, quota: {files: 5}}]', 'm.yaml', '/');
    expect(ro.roots[0]?.quota).toEqual({ files: 5 });
    expect(c.hide).toContain('**/.env');
    const own = parseMountFile('preset: sandboxed\nbackend: {type: local, path: x}\nroots: [{path: /a}]\nhide: ["*.key"]', 'm.yaml', '/');
    expect(own.hide).toEqual([...SECRET_GLOBS, '*.key']);
    expect(errorOf('preset: yolo\nbackend: {type: local, path: x}\nroots: [{path: /a}]')).toBe(
      'case.yaml: preset: expected "trusted", "sandboxed" or "readonly", got "yolo"',
    );
  });

  describe('hide lists: the file\'s is added to the preset\'s unless it says to replace it (issue 16.3)', () => {
    const file = (extra: string) => parseMountFile(`preset: sandboxed\nbackend: {type: local, path: x}\nroots: [{path: /a}]\n${extra}`, 'm.yaml', '/');
    it('hide: [**/.env] keeps the preset\'s *.pem (a file that hides one name no longer shows the rest)', () => {
      const c = file('hide: ["**/.env", "drafts"]');
      expect(c.hide).toEqual([...SECRET_GLOBS, 'drafts']);
      expect(c.hide).toContain('**/*.pem');
    });
    it('hide!: replaces the preset\'s list', () => {
      expect(file('"hide!": ["**/.env"]').hide).toEqual(['**/.env']);
    });
    it('replaceHide: true replaces it too', () => {
      expect(file('hide: ["**/.env"]\nreplaceHide: true').hide).toEqual(['**/.env']);
      expect(file('hide: []\nreplaceHide: true').hide).toEqual([]);
    });
    it('no preset: the file\'s list as given', () => {
      expect(parseMountFile('backend: {type: local, path: x}\nroots: [{path: /a}]\nhide: ["x"]', 'm.yaml', '/').hide).toEqual(['x']);
    });
    it('hide and hide! together are an error naming both', () => {
      expect(errorOf('preset: sandboxed\nbackend: {type: local, path: x}\nroots: [{path: /a}]\nhide: [a]\n"hide!": [b]')).toBe(
        "case.yaml: hide and hide! cannot both be given: hide adds to the preset's list, hide! replaces it",
      );
    });
  });
});

describe('privileges', () => {
  it('absent: none granted (the policy defaults); given: merged field by field; a typo names the allowed fields', async () => {
    const { CompiledPolicy } = await import('../../src/policy/compile.js');
    expect(new CompiledPolicy(parseMountFile(CASE, 'case.yaml', '/cases')).privileges).toEqual({ setid: false, chown: false, devices: false });
    const c = parseMountFile(`${CASE}privileges: { devices: true }\n`, 'case.yaml', '/cases');
    expect(new CompiledPolicy(c).privileges).toEqual({ setid: false, chown: false, devices: true });
    expect(errorOf(`${CASE}privileges: { setuid: true }\n`)).toMatch(/privileges\.setuid: unknown field \(did you mean "setid"\?\); allowed here: setid, chown, devices/);
    expect(errorOf(`${CASE}privileges: { chown: yes please }\n`)).toMatch(/privileges\.chown/);
  });
});
