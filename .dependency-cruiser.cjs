/*
 * The layering of src/, written once: each layer may import only the layers before it in
 * LAYERS, and another layer only through that layer's index.ts (its public surface). Every
 * file-level import cycle fails too. `npm run lint:deps` checks it; scripts/test runs it first.
 * docs/architecture.md draws the same order.
 */
const LAYERS = ['config', 'core', 'backend', 'policy', 'vfs', 'journal', 'fuse', 'sandbox', 'app', 'cli'];
/** layers outside the order: a tool of its own that only the CLI starts */
const APART = ['dev'];

const any = (names) => `^src/(${names.join('|')})/`;

const upward = LAYERS.slice(0, -1).map((layer, i) => ({
  name: `upward-from-${layer}`,
  comment: `${layer}/ may import only ${LAYERS.slice(0, i).join(', ') || 'nothing else in src'} (the layers below it)`,
  severity: 'error',
  from: { path: `^src/${layer}/` },
  to: { path: any([...LAYERS.slice(i + 1), ...APART]) },
}));

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'no import cycle between files (and so none between layers)',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    ...upward,
    {
      name: 'through-the-index',
      comment: 'another layer is imported only through its index.ts',
      severity: 'error',
      from: { path: '^src/([^/]+)/' },
      to: { path: '^src/[^/]+/', pathNot: ['^src/$1/', '^src/[^/]+/index\\.ts$'] },
    },
    {
      name: 'apart-stays-apart',
      comment: `${APART.join(', ')}: imports nothing of the rest, and only cli/ starts it`,
      severity: 'error',
      from: { path: any(APART) },
      to: { path: '^src/', pathNot: '^src/$1/' },
    },
    {
      name: 'only-cli-starts-apart',
      severity: 'error',
      from: { path: '^src/', pathNot: [any(APART), '^src/cli/'] },
      to: { path: any(APART) },
    },
    {
      name: 'no-files-outside-layers',
      comment: 'every module of src/ lives in a layer directory',
      severity: 'error',
      from: { path: '^src/[^/]+$' },
      to: {},
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    includeOnly: '^src/',
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};

// exported apart from the configuration, for the layering test and the architecture note
Object.defineProperty(module.exports, 'layers', { value: { LAYERS, APART }, enumerable: false });
