import { createRequire } from 'node:module';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { OP_NAMES, opTableProblem } from '../../src/fuse/native-ll-binding.js';

/** The C op table (LEDGERFS_OPS) and the TypeScript one cannot drift: the built addon says its own. */
describe('native-ll op table', () => {
  const file = path.resolve('native/build/Release/ledgerfs_fuse3_ll.node');

  it('the built addon numbers its ops as the binding does', () => {
    const addon = createRequire(import.meta.url)(file) as { opNames: string[] };
    expect(addon.opNames).toEqual([...OP_NAMES]);
    expect(opTableProblem(addon.opNames)).toBeNull();
  });

  it('an addon with another order, or none, is refused with the command that rebuilds it', () => {
    const swapped = [...OP_NAMES];
    [swapped[0], swapped[1]] = [swapped[1] as string, swapped[0] as string];
    expect(opTableProblem(swapped)).toMatch(/rebuild it: node scripts\/build-native.mjs --force/);
    expect(opTableProblem([...OP_NAMES, 'EXTRA'])).not.toBeNull();
    expect(opTableProblem(undefined)).toMatch(/op table \(none\)/);
  });
});
