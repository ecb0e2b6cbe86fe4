import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { ConfigError, loadMountFile, POLICY_PRESETS, PRESET_NAMES } from '../config/index.js';
import { CompiledPolicy, describePolicy, policyJson } from '../policy/index.js';
import { UserError } from '../app/index.js';

const FORMAT_HELP = `
The file (YAML or JSON):
  preset: sandboxed                 # optional: ${PRESET_NAMES.join(' | ')}
  backend: { type: local, path: ./workspace }      # relative to this file
  roots:                            # what the view shows; everything else does not exist
    - path: /projects/Wilson-MVA    # where it appears in the view
      source: /cases/wilson         # backend prefix (default: the same as path)
      mode: rw                      # ro | rw (default ro, or the preset's)
      quota: { bytes: 50MiB, files: 1000 }   # EDQUOT past it; df shows it
      maxFileBytes: 20MiB           # EFBIG past it
      suffixes: [.pdf, .md, .txt]   # names of files created or written (EACCES otherwise)
      readonly: ["intake/**"]       # globs relative to the root (EACCES)
      hide: ["drafts/private"]      # globs relative to the root (ENOENT)
      limits: { deletes: 100 }      # what one session may change in this root (as below)
    - path: /Tools
      mode: ro                      # EROFS on any change
  hide: ["**/.env", "**/*.pem"]     # globs relative to the view root, in every root; added
                                    # to the preset's list (hide!: [...] or replaceHide: true
                                    # replaces it)
  readonly: []                      # same, read-only
  defaults: { mode: ro, quota: {bytes: 1GiB} }   # for roots that do not say
  limits:                           # what one session (one mount, one run) may change, all
    deletes: 500                    # roots together; over the preset's, field by field:
    renames: 500                    #   deletes (unlink, rmdir) and renames: EPERM past it;
    filesWritten: 2000              #   files created or written (each counted once) and
    bytesWritten: 1GiB              #   bytes written: EDQUOT past it. /.ledgerfs/session
                                    #   shows the counts; a refusal says which limit
  state: ./journal                  # journal directory (passed to the journal)
  session: run-42
  privileges:                       # what only an operator should do; all refused (EPERM) unless true
    setid: false                    # set S_ISUID, or S_ISGID on a file (chmod, create, mknod)
    chown: false                    # chown/chgrp to another user or group than the caller's
    devices: false                  # make character/block device nodes (local backend only)
Sizes: 1024, 512K, 50MiB, 2GiB (binary), 2GB (decimal); null or "unlimited" lifts a limit.
Globs: * ? [a-z] {a,b} and ** (any depth); a pattern without "/" matches at any depth;
a pattern matching a directory covers everything below it.

Presets (the file's own fields win, field by field; a readonly list replaces the preset's,
a hide list is added to it):
${PRESET_NAMES.map((n) => `  ${n.padEnd(10)} ${POLICY_PRESETS[n].description}`).join('\n')}
`;

export function registerPolicyCommand(program: Command): void {
  const policy = program.command('policy').description('Work with mount/policy files.');
  policy
    .command('check')
    .description('Validate a mount/policy file and print the view it compiles to: roots, modes, limits, hidden names.')
    .argument('<file>', 'the mount/policy file (YAML or JSON)')
    .option('--json', 'print the compiled view as JSON', false)
    .addHelpText('after', `\nExamples:\n  ledgerfs policy check case.yaml\n  ledgerfs policy check --json case.yaml | jq .roots\n${FORMAT_HELP}`)
    .action((file: string, o: { json: boolean }) => {
      let compiled: CompiledPolicy;
      try {
        compiled = new CompiledPolicy(loadMountFile(file));
      } catch (err) {
        if (err instanceof ConfigError) throw new UserError(err.message);
        throw err;
      }
      // The file is valid; the machine may still lack what it names (it may be checked elsewhere).
      const b = compiled.config.backend;
      if (b.type === 'local') {
        if (!fs.existsSync(b.path)) process.stderr.write(`warning: backend.path ${b.path} does not exist here\n`);
        else {
          for (const r of compiled.roots) {
            const dir = path.join(b.path, r.source);
            if (!fs.existsSync(dir)) process.stderr.write(`warning: roots[${r.index}]: ${dir} does not exist; mounting will fail until it does\n`);
          }
        }
      }
      process.stdout.write(o.json ? JSON.stringify(policyJson(compiled), null, 2) + '\n' : describePolicy(compiled));
    });
}
