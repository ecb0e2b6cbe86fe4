#!/usr/bin/env node
// Syscall loops for scripts/bench, run as a child so one process does the whole loop (no spawn
// per file) and times itself: prints one JSON line {ops, seconds, ...} on stdout.
//
//   fsloop.mjs stat        BASE LISTFILE            one stat() of every BASE/<line>
//   fsloop.mjs stat-cached BASE LISTFILE BUDGET_MS  warm pass, then passes for ~BUDGET_MS; median pass
//   fsloop.mjs create      DIR N BYTES              N x open(O_CREAT|O_TRUNC|O_WRONLY)/write/close
import fs from 'node:fs';

const now = () => process.hrtime.bigint();
const secs = (a, b) => Number(b - a) / 1e9;

function readList(base, listFile) {
  return fs.readFileSync(listFile, 'utf8').split('\n').filter(Boolean).map((rel) => `${base}/${rel}`);
}

function statPass(files) {
  const t0 = now();
  for (const f of files) fs.statSync(f);
  return secs(t0, now());
}

const [mode, ...args] = process.argv.slice(2);
let out;
switch (mode) {
  case 'stat': {
    const files = readList(args[0], args[1]);
    const s = statPass(files);
    out = { ops: files.length, seconds: s };
    break;
  }
  case 'stat-cached': {
    // Cached = within the kernel's attr/entry timeout (1 s by default for all peers). The first
    // pass fills the cache; time passes while the entries it made are still young, and report
    // the median pass (a pass that hits an expiring entry is an outlier, not the norm).
    const files = readList(args[0], args[1]);
    const budget = Number(args[2] ?? 300) / 1000;
    const warm = [statPass(files)];
    if (warm[0] > 0.5) warm.push(statPass(files)); // slow first pass: refresh what expired meanwhile
    const passes = [];
    const t0 = now();
    const window = Math.max(0.05, Math.min(budget, 0.8 - warm[warm.length - 1]));
    do passes.push(statPass(files));
    while (passes.length < 3 || (secs(t0, now()) < window && passes.length < 200));
    const sorted = [...passes].sort((a, b) => a - b);
    const med = sorted[Math.floor(sorted.length / 2)];
    out = { ops: files.length, seconds: med, warmSeconds: warm, passes: passes.length, minPass: sorted[0], maxPass: sorted.at(-1) };
    break;
  }
  case 'create': {
    const [dir, nStr, bytesStr] = args;
    const n = Number(nStr);
    const buf = Buffer.alloc(Number(bytesStr), 0x61);
    const t0 = now();
    for (let i = 0; i < n; i++) {
      const fd = fs.openSync(`${dir}/f${i}`, 'w', 0o644);
      fs.writeSync(fd, buf, 0, buf.length, 0);
      fs.closeSync(fd);
    }
    out = { ops: n, seconds: secs(t0, now()) };
    break;
  }
  default:
    process.stderr.write(`fsloop: unknown mode ${mode}\n`);
    process.exit(2);
}
process.stdout.write(`${JSON.stringify(out)}\n`);
