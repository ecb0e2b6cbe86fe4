#!/usr/bin/env node
// Entry point: runs the compiled CLI (npm run build). Kept in plain JS so `npx ledgerfs` works.
import { main } from '../dist/cli/main.js';

await main(process.argv);
