import { describe, expect, it } from 'vitest';
import { parseMountFile } from '../../src/config/load.js';
import { CompiledPolicy, CompiledRoot } from '../../src/policy/compile.js';
import { rules, sameRoot, whereChange, whereCreate } from '../../src/policy/decide.js';
import { VfsError } from '../../src/core/errors.js';
import { CASE_POLICY } from '../helpers/policy.js';

function compile(body: string): CompiledPolicy {
  return new CompiledPolicy(parseMountFile(`backend: {type: local, path: /w}\n${body}`, 'p.yaml', '/'));
}

const codeOf = (r: unknown) => (r instanceof VfsError ? r.code : r instanceof CompiledRoot ? `root ${r.path}` : r);

describe('compiled policy: where a path lands', () => {
  const p = compile(CASE_POLICY);

  it('finds roots, synthesized parents, /.ledgerfs and nothing', () => {
    const at = (path: string) => {
      const l = p.locate(path);
      return l === null ? null : l.kind === 'root' ? `root ${l.path}` : l.kind === 'synth' ? `synth ${l.path}` : `meta ${l.name}`;
    };
    expect(at('/')).toBe('synth /');
    expect(at('/projects')).toBe('synth /projects');
    expect(at('/projects/Wilson-MVA')).toBe('root /projects/Wilson-MVA');
    expect(at('/projects/Wilson-MVA/a/b/c.md')).toBe('root /projects/Wilson-MVA');
    expect(at('/projects/Other-Case')).toBeNull();
    expect(at('/projects/Wilson-MVAx')).toBeNull();
    expect(at('/Tools/x')).toBe('root /Tools');
    expect(at('/unexposed.txt')).toBeNull();
    expect(at('/.ledgerfs')).toBe('meta ');
    expect(at('/.ledgerfs/denials')).toBe('meta denials');
    expect(at('/.ledgerfs/nope')).toBeNull();
    expect(at('/.ledgerfsx')).toBeNull();
  });

  it('lists only the way to the roots', () => {
    expect(p.top.kind === 'synth' && p.top.names).toEqual(['projects', 'Tools', 'scratch']);
    const projects = p.locate('/projects');
    expect(projects?.kind === 'synth' && projects.names).toEqual(['Wilson-MVA']);
  });

  it('translates view paths to backend paths through a root source', () => {
    const scratch = p.locate('/scratch/a/b') as CompiledRoot;
    expect(scratch.toBackend('/scratch')).toBe('/tmp-area');
    expect(scratch.toBackend('/scratch/a/b')).toBe('/tmp-area/a/b');
    expect(scratch.toView('/tmp-area/a/b')).toBe('/scratch/a/b');
    const atTop = compile('roots: [{path: /, source: /data/ws, mode: rw}]').roots[0] as CompiledRoot;
    expect(atTop.toBackend('/')).toBe('/data/ws');
    expect(atTop.toBackend('/x/y')).toBe('/data/ws/x/y');
    expect(atTop.toView('/data/ws/x')).toBe('/x');
    const fromTop = compile('roots: [{path: /view, source: /, mode: rw}]').roots[0] as CompiledRoot;
    expect(fromTop.toBackend('/view')).toBe('/');
    expect(fromTop.toBackend('/view/x')).toBe('/x');
    expect(fromTop.toView('/x')).toBe('/view/x');
  });

  it('matches hide globs from the view root and root globs from the root', () => {
    const w = p.locate('/projects/Wilson-MVA') as CompiledRoot;
    expect(w.isHidden('/projects/Wilson-MVA/.env')).toBe(true);
    expect(w.isHidden('/projects/Wilson-MVA/a/k.pem')).toBe(true);
    expect(w.isHidden('/projects/Wilson-MVA/notes.md')).toBe(false);
    expect(w.isReadonly('/projects/Wilson-MVA/intake/form.pdf')).toBe(true);
    expect(w.isReadonly('/projects/Wilson-MVA/intake')).toBe(false);
    expect(w.hidingPattern('/projects/Wilson-MVA/a/k.pem')).toBe('**/*.pem');
    expect(w.positional).toBe(true); // intake/** depends on the directory
    expect((p.locate('/Tools') as CompiledRoot).positional).toBe(false);
  });

  it('matches hide globs whatever the case (a credential in capitals is one too), readonly globs by case', () => {
    const w = p.locate('/projects/Wilson-MVA') as CompiledRoot;
    expect(w.isHidden('/projects/Wilson-MVA/Server.PEM')).toBe(true);
    expect(w.hidingPattern('/projects/Wilson-MVA/Server.PEM')).toBe('**/*.pem');
    expect(w.isHidden('/projects/Wilson-MVA/Notes.md')).toBe(false);
    expect(codeOf(whereCreate(p, '/projects/Wilson-MVA/.ENV', 'create', false))).toBe('EACCES');
    const sandboxed = compile('preset: sandboxed\nroots: [{path: /r, mode: rw}]');
    const r = sandboxed.roots[0] as CompiledRoot;
    for (const name of ['Server.PEM', 'a/API.Key', '.ENV', '.Env.local', 'ID_RSA', '.SSH/config', 'x/.AWS/credentials']) {
      expect(r.isHidden(`/r/${name}`), name).toBe(true);
    }
    const own = compile('roots: [{path: /r, mode: rw, hide: [Drafts/Private], readonly: [Intake/**]}]').roots[0] as CompiledRoot;
    expect(own.isHidden('/r/drafts/private/x.md')).toBe(true);
    expect(own.isReadonly('/r/Intake/form.pdf')).toBe(true);
    expect(own.isReadonly('/r/intake/form.pdf')).toBe(false);
  });

  it('checks suffixes case-insensitively on the name only', () => {
    const w = p.locate('/projects/Wilson-MVA') as CompiledRoot;
    expect(w.suffixAllowed('/projects/Wilson-MVA/a/Report.PDF')).toBe(true);
    expect(w.suffixAllowed('/projects/Wilson-MVA/a.pdf.exe')).toBe(false);
    expect(w.suffixAllowed('/projects/Wilson-MVA/.md')).toBe(false); // a bare suffix is not a name
    expect((p.locate('/Tools') as CompiledRoot).suffixAllowed('/Tools/x.sh')).toBe(true);
  });
});

describe('decisions', () => {
  const p = compile(CASE_POLICY);
  const w = p.locate('/projects/Wilson-MVA') as CompiledRoot;
  const tools = p.locate('/Tools') as CompiledRoot;

  it('changes: outside ENOENT, synthesized and /.ledgerfs EROFS, hidden ENOENT, roots cannot go', () => {
    expect(codeOf(whereChange(p, '/unexposed.txt', 'write to', false))).toBe('ENOENT');
    expect(codeOf(whereChange(p, '/projects', 'change mode of', false))).toBe('EROFS');
    expect(codeOf(whereChange(p, '/.ledgerfs/usage', 'write to', false))).toBe('EROFS');
    expect(codeOf(whereChange(p, '/projects/Wilson-MVA/.env', 'write to', false))).toBe('ENOENT');
    expect(codeOf(whereChange(p, '/projects/Wilson-MVA', 'remove directory', true))).toBe('EROFS');
    expect(codeOf(whereChange(p, '/projects/Wilson-MVA', 'change mode of', false))).toBe('root /projects/Wilson-MVA');
  });

  it('creates: EROFS in synthesized dirs, EEXIST for them (mkdir -p), EACCES for hidden names', () => {
    expect(codeOf(whereCreate(p, '/projects/new', 'make directory', false))).toBe('EROFS');
    expect(codeOf(whereCreate(p, '/newtop', 'create', false))).toBe('EROFS');
    expect(codeOf(whereCreate(p, '/projects', 'make directory', false))).toBe('EEXIST');
    expect(codeOf(whereCreate(p, '/projects/Wilson-MVA', 'make directory', false))).toBe('EEXIST');
    expect(codeOf(whereCreate(p, '/projects/Wilson-MVA', 'rename x to', true))).toBe('EROFS');
    expect(codeOf(whereCreate(p, '/projects/Other-Case/x', 'create', false))).toBe('ENOENT');
    const hidden = whereCreate(p, '/projects/Wilson-MVA/.env', 'create', false) as VfsError;
    expect(hidden.code).toBe('EACCES');
    expect(hidden.reason).toBe('create /projects/Wilson-MVA/.env refused: names matching **/.env are hidden by the policy');
    expect(codeOf(whereCreate(p, '/projects/Wilson-MVA/.env/x', 'create', false))).toBe('ENOENT');
  });

  it('rules: read-only roots EROFS with the writable roots named, globs and suffixes EACCES', () => {
    const ro = rules(p, tools, '/Tools/build.py', 'write to', true) as VfsError;
    expect(ro.code).toBe('EROFS');
    expect(ro.reason).toBe('write to /Tools/build.py refused: /Tools is read-only; writable roots: /projects/Wilson-MVA, /scratch');
    expect(rules(p, w, '/projects/Wilson-MVA/intake/form.pdf', 'write to', true)?.code).toBe('EACCES');
    expect(rules(p, w, '/projects/Wilson-MVA/run.sh', 'create', true)?.code).toBe('EACCES');
    expect(rules(p, w, '/projects/Wilson-MVA/run.sh', 'make directory', false)).toBeNull();
    expect(rules(p, w, '/projects/Wilson-MVA/a.md', 'create', true)).toBeNull();
  });

  it('rename and link stay in one root', () => {
    expect(sameRoot('rename', '/a', w, '/b', w)).toBeNull();
    expect(sameRoot('rename', '/projects/Wilson-MVA/a', w, '/Tools/a', tools)?.code).toBe('EXDEV');
  });
});
