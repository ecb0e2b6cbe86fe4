// --fuse-ops: count the FUSE requests the kernel sends to a mount during a round, by opcode, with
// the kernel's fuse:fuse_request_send tracepoint (Linux >= 6.14) in the ftrace ring buffer.
// Works the same for every FUSE daemon (bindfs, ledgerfs, anything), costs ~nothing per request,
// and tells why a daemon is slow: how many round trips a workload takes, how many fail (ENOENT
// lookups, ENOSYS), and how big READ and WRITE requests are (WRITE: request length minus its
// 80-byte header; READ: reply length minus its 16-byte header, from fuse_request_end).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { mountAt, say } from './util.mjs';

const T = '/sys/kernel/tracing';
const EV = `${T}/events/fuse/fuse_request_send`;
const EV_END = `${T}/events/fuse/fuse_request_end`;
const EVENTS = [EV, EV_END];

export class FuseOpsTracer {
  constructor() {
    this.mountedTracefs = false;
    this.savedBufferKb = null;
  }

  /** Set up; returns null when ready, else why it cannot trace. */
  open() {
    if (!fs.existsSync(`${T}/events`)) {
      try {
        execFileSync('mount', ['-t', 'tracefs', 'nodev', T], { stdio: 'ignore' });
        this.mountedTracefs = true;
      } catch (e) {
        return `cannot mount tracefs at ${T}: ${e.message}`;
      }
    }
    if (!fs.existsSync(EV)) return 'this kernel has no fuse:fuse_request_send tracepoint (Linux >= 6.14)';
    try {
      this.savedBufferKb = fs.readFileSync(`${T}/buffer_size_kb`, 'utf8').trim().split(' ')[0];
      // 1 GiB in 4 KiB WRITEs is 262144 events of ~40 bytes: keep them all.
      fs.writeFileSync(`${T}/buffer_size_kb`, '32768');
      for (const e of EVENTS) fs.writeFileSync(`${e}/enable`, '0');
    } catch (e) {
      return `cannot use ftrace: ${e.message}`;
    }
    return null;
  }

  /** Start counting requests to the FUSE connection mounted at `mnt`. */
  start(mnt) {
    const devField = mountAt(mnt)?.dev;
    if (!devField) return false;
    const [maj, min] = devField.split(':').map(Number);
    const dev = (maj << 20) | min; // the kernel's dev_t encoding
    for (const e of EVENTS) fs.writeFileSync(`${e}/filter`, `connection == ${dev}`);
    fs.writeFileSync(`${T}/trace`, '');
    for (const e of EVENTS) fs.writeFileSync(`${e}/enable`, '1');
    this.active = true;
    return true;
  }

  /**
   * Stop; returns {ops: {OPCODE: {count, errors, bytes}}, lost}. bytes: WRITE payload sent,
   * READ payload returned. lost > 0 if the ring buffer overflowed (counts are then too low).
   */
  stop() {
    if (!this.active) return null;
    this.active = false;
    for (const e of EVENTS) fs.writeFileSync(`${e}/enable`, '0');
    const ops = {};
    let lost = 0;
    for (const cpuDir of fs.readdirSync(`${T}/per_cpu`)) {
      const stats = fs.readFileSync(`${T}/per_cpu/${cpuDir}/stats`, 'utf8');
      lost += Number(/overrun: (\d+)/.exec(stats)?.[1] ?? 0);
    }
    const text = fs.readFileSync(`${T}/trace`, 'utf8');
    const opOf = new Map(); // unique -> opcode
    const re = /fuse_request_(send|end): connection \d+ req (\d+) (?:opcode \d+ \(FUSE_(\w+)\) len (\d+)|len (\d+) error (-?\d+))/g;
    let m;
    while ((m = re.exec(text))) {
      if (m[1] === 'send') {
        const o = (ops[m[3]] ??= { count: 0, errors: 0, bytes: 0 });
        o.count++;
        if (m[3] === 'WRITE') o.bytes += Number(m[4]) - 80;
        opOf.set(m[2], m[3]);
      } else {
        const op = opOf.get(m[2]);
        if (!op) continue;
        opOf.delete(m[2]);
        if (Number(m[6]) !== 0) ops[op].errors++;
        else if (op === 'READ') ops[op].bytes += Math.max(0, Number(m[5]) - 16);
      }
    }
    fs.writeFileSync(`${T}/trace`, '');
    for (const e of EVENTS) fs.writeFileSync(`${e}/filter`, '0');
    return { ops, lost };
  }

  close() {
    try {
      if (this.active) this.stop();
      for (const e of EVENTS) fs.writeFileSync(`${e}/enable`, '0');
      if (this.savedBufferKb) fs.writeFileSync(`${T}/buffer_size_kb`, this.savedBufferKb);
    } catch {
      /* best effort */
    }
    if (this.mountedTracefs) {
      try {
        execFileSync('umount', [T], { stdio: 'ignore' });
      } catch {
        say(`  (could not unmount the tracefs this run mounted at ${T})`);
      }
    }
  }
}

/** "LOOKUP 3000, GETATTR 12, WRITE 1024 (avg 1.0 MiB)" */
export function fmtOps(ops) {
  if (!ops) return '-';
  return Object.entries(ops)
    .sort((a, b) => b[1].count - a[1].count)
    .map(([op, { count, errors, bytes }]) => {
      let s = `${op} ${count}`;
      if ((op === 'WRITE' || op === 'READ') && count) s += ` (avg ${fmtKiB(bytes / count)})`;
      if (errors) s += ` [${errors} err]`;
      return s;
    })
    .join(', ');
}

function fmtKiB(b) {
  return b >= 1024 * 1024 ? `${(b / 1024 / 1024).toFixed(1)} MiB` : `${(b / 1024).toFixed(1)} KiB`;
}
