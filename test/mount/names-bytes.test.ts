import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLI, onGcs, py, startMount, TEST_BINDING, type TestMount } from '../helpers/mount.js';
import { startJournaledMount, type JournaledMount } from '../helpers/journaled-mount.js';
import { makeTemp, rmTemp } from '../helpers/tmp.js';

/*
 * Names are bytes (issue 15): a name that is not UTF-8 is created, listed, stat'ed, renamed,
 * unlinked, journaled and rolled back with exactly its bytes, and two such names never collide
 * (before: each invalid byte became U+FFFD, so b'a-\xff' and b'a-\xfe' were one name). GCS
 * object names must be UTF-8: there such a name is refused with EILSEQ.
 * Python speaks bytes to the OS (os.listdir(b'.')), so it is the test's hands and eyes.
 * fuse-native (libfuse 2 through its npm module) hands names over as JS strings: out of scope.
 */

const PY_NAMES = `
import os, json, errno
NAMES = [b'a-\\xff', b'a-\\xfe', b'b-\\xe7w\\xf0', 'é'.encode(), '日本'.encode(), b'c-\\xed\\xb2\\x80', b'd-\\xef\\xbf\\xbd']
def hexes(xs): return sorted(x.hex() for x in xs)
`;

function ledgerfs(m: TestMount, args: string[]): string {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...m.env }, timeout: 60_000 });
  if (r.status !== 0) throw new Error(`ledgerfs ${args.join(' ')} exited ${r.status}\n${r.stderr}\n${r.stdout}`);
  return r.stdout;
}

describe.skipIf(TEST_BINDING === 'fuse-native')('mount: names as bytes', () => {
  let j: JournaledMount;
  let m: TestMount;
  beforeEach(async () => {
    j = await startJournaledMount('names-run', {
      // names the session does not make: a rollback must bring them back, byte for byte
      populate: (src) => {
        if (!onGcs) py(`import os\nopen(b'old-\\xfb', 'w').write('old')\nos.mkdir(b'dir-\\xfa')\nopen(b'dir-\\xfa/in-\\xf9', 'w').write('in')\n`, src);
      },
    });
    m = j.m;
  });
  afterEach(async () => {
    expect(await j.finish(), 'the daemon logged errors').toEqual([]);
  });

  it.skipIf(onGcs)('create, list, stat, rename and unlink keep every byte, and no two names collide', () => {
    const out = py(
      `${PY_NAMES}
for i, n in enumerate(NAMES):
    with open(n, 'xb') as f: f.write(b'x' * (i + 1))   # 'x': a collision would be EEXIST
res = {}
res['list'] = hexes(os.listdir(b'.'))
res['sizes'] = [os.stat(n).st_size for n in NAMES]
res['read'] = [len(open(n, 'rb').read()) for n in NAMES]
os.rename(b'a-\\xff', b'e-\\xfc')
os.unlink(b'a-\\xfe')
os.mkdir(b'f-\\xf8')
open(b'f-\\xf8/g-\\xf7', 'w').write('deep')
os.rename(b'b-\\xe7w\\xf0', b'f-\\xf8/h-\\xf6')
res['after'] = hexes(os.listdir(b'.'))
res['deep'] = hexes(os.listdir(b'f-\\xf8'))
res['deepstat'] = os.stat(b'f-\\xf8/h-\\xf6').st_size
res['gone'] = [os.path.lexists(n) for n in (b'a-\\xff', b'a-\\xfe', b'b-\\xe7w\\xf0')]
# as strings, Python's own escapes (PEP 383): what its test suite uses
res['str'] = sorted(os.listdir('.'))
print(json.dumps(res))
`,
      m.mnt,
    );
    const r = JSON.parse(out) as Record<string, unknown>;
    const hex = (xs: string[]) => xs.map((s) => Buffer.from(s, 'latin1').toString('hex')).sort();
    expect(r.list).toEqual(hex(['a-\xff', 'a-\xfe', 'b-\xe7w\xf0', 'old-\xfb', 'dir-\xfa']).concat(['c3a9', 'e697a5e69cac', '632dedb280', '642defbfbd']).sort());
    expect(r.sizes).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(r.read).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(r.gone).toEqual([false, false, false]);
    expect(r.deep).toEqual(hex(['g-\xf7', 'h-\xf6']));
    expect(r.deepstat).toBe(3);
    expect(r.str).toContain('e-\udcfc');
    expect(r.str).toContain('é');
    // the source holds exactly these bytes
    const src = JSON.parse(py(`${PY_NAMES}\nprint(json.dumps([hexes(os.listdir(b'.')), hexes(os.listdir(b'f-\\xf8'))]))`, m.src)) as unknown[];
    expect(src).toEqual([r.after, r.deep]);
    expect(r.after).toEqual(hex(['e-\xfc', 'f-\xf8', 'old-\xfb', 'dir-\xfa']).concat(['c3a9', 'e697a5e69cac', '632dedb280', '642defbfbd']).sort());
  });

  it.skipIf(onGcs)('a symlink whose target is not UTF-8 reads back byte for byte', () => {
    const out = py(
      `import os, json
os.symlink(b'tgt-\\xff/\\xfe-\\xe9t\\xe9', b'ln-\\xfd')
os.symlink('日本/é'.encode(), b'ln2')
print(json.dumps([os.readlink(b'ln-\\xfd').hex(), os.readlink(b'ln2').hex(), sorted(x.hex() for x in os.listdir(b'.') if x.startswith(b'ln'))]))
`,
      m.mnt,
    );
    const want = [Buffer.from('tgt-\xff/\xfe-\xe9t\xe9', 'latin1').toString('hex'), Buffer.from('日本/é').toString('hex')];
    expect(JSON.parse(out)).toEqual([...want, [Buffer.from('ln-\xfd', 'latin1').toString('hex'), Buffer.from('ln2').toString('hex')].sort()]);
    expect(py(`import os\nprint(os.readlink(b'ln-\\xfd').hex())`, m.src).trim()).toBe(want[0]);
  });

  it.skipIf(onGcs)('extended attribute names that are not UTF-8 are set, listed, read and removed by their bytes', () => {
    const q = `import os, json
p = b'x-\\xff'
res = []
if os.path.exists(p):
    res.append(sorted(n.encode('utf-8', 'surrogateescape').hex() for n in os.listxattr(p)))
else:
    open(p, 'w').close()
    for k, v in ((b'user.k-\\xfe', b'v1'), (b'user.k-\\xfd', b'v2'), ('user.é'.encode(), b'v3')): os.setxattr(p, k, v)
    res.append([os.getxattr(p, b'user.k-\\xfe').decode(), os.getxattr(p, b'user.k-\\xfd').decode()])
    os.removexattr(p, b'user.k-\\xfe')
    res.append(sorted(n.encode('utf-8', 'surrogateescape').hex() for n in os.listxattr(p)))
print(json.dumps(res))
`;
    const names = [Buffer.from('user.k-\xfd', 'latin1').toString('hex'), Buffer.from('user.é').toString('hex')].sort();
    expect(JSON.parse(py(q, m.mnt))).toEqual([['v1', 'v2'], names]);
    expect(JSON.parse(py(q, m.src))).toEqual([names]);
  });

  it.skipIf(onGcs)('the journal shows the names (\\xHH in text, the escape in --json) and a rollback restores the exact bytes', () => {
    const before = py(`${PY_NAMES}\nprint(json.dumps([hexes(os.listdir(b'.')), hexes(os.listdir(b'dir-\\xfa'))]))`, m.src);
    py(
      `${PY_NAMES}
open(b'a-\\xff', 'w').write('new')
open(b'a-\\xfe', 'w').write('new2')
os.rename(b'old-\\xfb', b'moved-\\xf5')
os.unlink(b'dir-\\xfa/in-\\xf9')
os.rmdir(b'dir-\\xfa')
os.symlink(b'\\xff', b'ln-\\xfd')
`,
      m.mnt,
    );
    const log = ledgerfs(m, ['log', '--state', j.state]);
    expect(log).toContain('create /a-\\xff');
    expect(log).toContain('create /a-\\xfe');
    expect(log).toContain('rename /old-\\xfb -> /moved-\\xf5');
    expect(log).toContain('unlink /dir-\\xfa/in-\\xf9');
    expect(log).toContain('symlink /ln-\\xfd -> \\xff');
    expect(log).not.toContain('\ufffd');
    const json = JSON.parse(ledgerfs(m, ['log', '--state', j.state, '--json'])) as { seq: number; op: string; paths: string[] }[];
    const made = json.find((e) => e.op === 'create' && e.paths[0] === '/a-\udcff');
    expect(made, JSON.stringify(json.map((e) => e.paths))).toBeDefined();
    expect(ledgerfs(m, ['show', '--state', j.state, String(made?.seq)])).toContain('/a-\\xff');

    ledgerfs(m, ['rollback', '--state', j.state, '--session', 'names-run']);
    const after = py(`${PY_NAMES}\nprint(json.dumps([hexes(os.listdir(b'.')), hexes(os.listdir(b'dir-\\xfa'))]))`, m.src);
    expect(after).toBe(before);
    expect(py(`print(open(b'old-\\xfb').read() + open(b'dir-\\xfa/in-\\xf9').read())`, m.mnt).trim()).toBe('oldin');
    expect(ledgerfs(m, ['verify', '--state', j.state])).toMatch(/^clean$/m);
  });

  it.runIf(onGcs)('GCS: a name that is not UTF-8 is refused with EILSEQ, a UTF-8 one is kept as it is', () => {
    const out = py(
      `${PY_NAMES}
res = []
for n in (b'a-\\xff', b'a-\\xfe', b'b-\\xe7w\\xf0'):
    for what, fn in (('create', lambda: open(n, 'w')), ('mkdir', lambda: os.mkdir(n)), ('symlink', lambda: os.symlink('t', n))):
        try:
            fn(); res.append('made')
        except OSError as e:
            res.append(errno.errorcode[e.errno])
open('é日本', 'w').write('ok')
open('src', 'w').write('s')
try:
    os.rename('src', b'r-\\xff'); res.append('renamed')
except OSError as e:
    res.append(errno.errorcode[e.errno])
print(json.dumps([res, hexes(os.listdir(b'.')), open('é日本').read()]))
`,
      m.mnt,
    );
    const [codes, names, content] = JSON.parse(out) as [string[], string[], string];
    expect(codes).toEqual(Array(10).fill('EILSEQ'));
    expect(names).toEqual([Buffer.from('src').toString('hex'), Buffer.from('é日本').toString('hex')].sort());
    expect(content).toBe('ok');
  });
});

describe.skipIf(onGcs || TEST_BINDING === 'fuse-native')('mount: policy globs match names that are not UTF-8', () => {
  it('a glob sees each such byte as one character, and "\\udcXX" in YAML names the byte XX', async () => {
    const dir = makeTemp('names-policy');
    const ws = path.join(dir, 'ws');
    fs.mkdirSync(path.join(ws, 'w'), { recursive: true });
    py(`for n in (b'secret-\\xff', b'secret-\\xfe', b'ro-\\xfd', b'ok-\\xfc'): open(b'w/' + n, 'w').write('x')`, ws);
    // YAML's double-quoted "\udcff" is the escape of byte 0xff; `ro-?` matches one byte
    fs.writeFileSync(path.join(dir, 'p.yaml'), 'backend: {type: local, path: ./ws}\nroots: [{path: /w, mode: rw, readonly: ["ro-?"]}]\nhide: ["secret-\\udcff"]\n');
    let m: TestMount | undefined;
    try {
      m = await startMount({ src: ws, omitSource: true, args: ['--policy', path.join(dir, 'p.yaml'), '--no-journal'] });
      const out = py(
        `import os, json, errno
res = [sorted(x.hex() for x in os.listdir(b'w'))]
for n, how in ((b'w/secret-\\xff', 'r'), (b'w/ro-\\xfd', 'a'), (b'w/ok-\\xfc', 'a')):
    try:
        open(n, how).close(); res.append('ok')
    except OSError as e:
        res.append(errno.errorcode[e.errno])
print(json.dumps(res))
`,
        m.mnt,
      );
      const hex = (xs: string[]) => xs.map((x) => Buffer.from(x, 'latin1').toString('hex')).sort();
      expect(JSON.parse(out)).toEqual([hex(['secret-\xfe', 'ro-\xfd', 'ok-\xfc']), 'ENOENT', 'EACCES', 'ok']);
    } finally {
      await m?.stop();
      rmTemp(dir);
    }
  });
});
