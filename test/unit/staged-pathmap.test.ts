import { describe, expect, it } from 'vitest';
import { PathMap } from '../../src/backend/layers/staged.js';
import { isWithin } from '../../src/core/index.js';

// PathMap.within answers "the keys at and below p" from counts kept per ancestor instead of a
// scan (a rename per git object made staged commits quadratic); it must answer as the scan did.
describe('staged overlay: PathMap', () => {
  it('within() equals a scan of every key, over random sets, deletes and clears', () => {
    let seed = 7;
    const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n);
    const names = ['a', 'b', 'c'];
    const randomPath = () => '/' + Array.from({ length: 1 + rnd(3) }, () => names[rnd(3)]).join('/');
    const m = new PathMap<number>();
    const scan = (p: string) => [...m.keys()].filter((k) => isWithin(k, p)).sort();
    for (let i = 0; i < 3000; i++) {
      const p = randomPath();
      const r = rnd(10);
      if (r < 5) m.set(p, i);
      else if (r < 9) m.delete(p);
      else if (rnd(20) === 0) m.clear();
      for (const q of ['/', randomPath(), randomPath()]) expect(m.within(q).sort()).toEqual(scan(q));
    }
    expect(m.size).toBeGreaterThan(0);
  });

  it('a key set again is counted once; deleting it forgets it below every ancestor', () => {
    const m = new PathMap<string>();
    m.set('/d/x', 'one').set('/d/x', 'two');
    expect(m.within('/d')).toEqual(['/d/x']);
    m.delete('/d/x');
    expect(m.within('/d')).toEqual([]);
    expect(m.within('/')).toEqual([]);
  });
});
