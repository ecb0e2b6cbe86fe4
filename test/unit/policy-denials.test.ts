import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseMountFile } from '../../src/config/load.js';
import { CompiledPolicy } from '../../src/policy/compile.js';
import { DenialLog } from '../../src/policy/denials.js';
import { denialLine, describeDenials, describeUsage } from '../../src/policy/describe.js';
import { UsageTable } from '../../src/policy/usage.js';
import { VfsError } from '../../src/core/errors.js';
import { CASE_POLICY, policyFixture } from '../helpers/policy.js';

describe('denials', () => {
  it('keeps the latest N, oldest first, and counts versions', () => {
    const log = new DenialLog(3);
    // a pid above the kernel's largest (2^22): no process has it, so no command line is added
    const pid = 4_194_305;
    for (let i = 0; i < 5; i++) log.record('write', `/Tools/f${i}`, new VfsError('EROFS', `refused ${i}`), i === 4 ? pid : undefined);
    expect(log.list().map((d) => d.path)).toEqual(['/Tools/f2', '/Tools/f3', '/Tools/f4']);
    expect(log.version).toBe(5);
    const last = log.list().at(-1);
    expect(last && denialLine(last)).toMatch(/^\d{4}-\d\d-\d\dT\S+Z pid=4194305 write \/Tools\/f4 EROFS: refused 4$/);
    expect(denialLine({ ...(last as NonNullable<typeof last>), pid: undefined, path: '/a b' })).toContain('pid=- write "/a b" EROFS');
    expect(describeDenials([])).toMatch(/no refusals yet/);
  });

  it('a refused name with a newline or ESC in it stays on its one line of /.ledgerfs/denials', async () => {
    const f = await policyFixture('roots:\n  - path: /case\n    mode: rw\n    suffixes: [.md]\n', (src) => fs.mkdirSync(path.join(src, 'case')));
    try {
      // the reason repeats the name: a program chose it to forge a refusal of someone else's
      const forged = 'x\n2026-11-26T05:00:00.000Z pid=1 write /case/other.md EROFS: forged\x1b[2K.exe';
      await expect(f.writeFile(`/case/${forged}`, 'x')).rejects.toThrow(/only files ending in/);
      const text = describeDenials(f.policy.denials.list());
      expect(text.trimEnd().split('\n'), text).toHaveLength(1);
      expect(text).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f-\x9f]/);
      expect(text).toContain('create /case/x\\x0a2026-11-26T05:00:00.000Z pid=1 write /case/other.md EROFS: forged\\x1b[2K.exe refused');
    } finally {
      await f.close();
    }
  });

  it('describes usage for people and in exact numbers for programs', () => {
    const p = new CompiledPolicy(parseMountFile(`backend: {type: local, path: /w}\n${CASE_POLICY}`, 'p.yaml', '/'));
    const usage = new UsageTable([{ bytes: 500, files: 4 }, null, { bytes: 7, files: 1 }]);
    const text = describeUsage(p, usage);
    expect(text).toMatch(/\/projects\/Wilson-MVA\s+rw\s+500 B \/ 1000 B \(50%\)\s+4 \/ 10 \(40%\)/);
    expect(text).toMatch(/\/Tools\s+ro\s+not counted/);
    expect(text).toContain('/projects/Wilson-MVA bytes=500 files=4 quota_bytes=1000 quota_files=10\n');
    expect(text).toContain('/scratch bytes=7 files=1\n');
  });
});
