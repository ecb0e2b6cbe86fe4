#!/usr/bin/env node
// mount(8)'s helper for type fuse.ledgerfs, run by bin/mount.fuse.ledgerfs. See src/cli/mount-helper.ts.
import { fileURLToPath } from 'node:url';
import { helperMain } from '../dist/cli/main.js';

await helperMain(process.argv.slice(2), fileURLToPath(new URL('./ledgerfs.js', import.meta.url)));
