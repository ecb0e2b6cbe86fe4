import { printable } from '../core/index.js';
import { formatSize, POLICY_PRESETS } from '../config/index.js';
import { type CompiledPolicy, limitsLine } from './compile.js';
import { type ChangeLimits, type Counts, LIMIT_WHAT, limitText } from './limits.js';
import type { Denial } from './denials.js';
import type { UsageTable } from './usage.js';

/**
 * The policy in words: what `ledgerfs policy check` prints and what /.ledgerfs/{policy,usage,
 * denials} contain. Written for the program's person and for an agent reading it in-sandbox.
 */

/**
 * Who reads the description: the operator (`ledgerfs policy check`) gets where everything is on
 * the host; a program (/.ledgerfs/policy, inside the view) only the view's own names: no
 * backend location, no root's place in the backend, no policy file or state path.
 */
export type Audience = 'operator' | 'program';

function backendText(p: CompiledPolicy, audience: Audience): string {
  const b = p.config.backend;
  if (audience === 'program') return b.type === 'local' ? 'a local directory' : 'a GCS bucket';
  if (b.type === 'local') return `local directory ${b.path}`;
  return `GCS bucket gs://${b.bucket}/${b.prefix ?? ''}${b.apiEndpoint ? ` (endpoint ${b.apiEndpoint})` : ''}`;
}

export function describePolicy(p: CompiledPolicy, audience: Audience = 'operator'): string {
  const c = p.config;
  const lines: string[] = [];
  const from = c.file && audience === 'operator' ? ` from ${c.file}` : '';
  lines.push(`ledgerfs policy${from}${c.preset ? ` (preset ${c.preset}: ${POLICY_PRESETS[c.preset].description})` : ''}`);
  lines.push(`backend: ${backendText(p, audience)}`);
  lines.push('');
  lines.push('roots (everything else does not exist):');
  for (const r of p.roots) {
    const src = r.identity || audience === 'program' ? '' : ` (backend ${r.source})`;
    lines.push(`  ${r.path}  ${r.writable ? 'read-write' : 'read-only'}${src}`);
    if (r.writable) for (const l of p.limitsText(r)) lines.push(`      ${l}`);
    else if (r.quota.bytes !== undefined || r.quota.files !== undefined) lines.push(`      ${p.limitsText(r)[0]}`);
    if (r.config.readonly.length) lines.push(`      read-only inside: ${r.config.readonly.join(', ')}`);
    if (r.config.hide.length) lines.push(`      hidden inside: ${r.config.hide.join(', ')}`);
  }
  lines.push('');
  lines.push(`hidden everywhere (these names do not exist): ${c.hide.length ? c.hide.join(', ') : 'nothing'}`);
  if (c.readonly.length) lines.push(`read-only everywhere: ${c.readonly.join(', ')}`);
  const session = limitsLine(c.limits);
  if (session) lines.push(`a session (one mount, one run) may change at most: ${session}`);
  lines.push('');
  lines.push('errors you may see:');
  lines.push('  EROFS   writing to a read-only root, a directory leading to the roots, or this directory');
  lines.push('  EACCES  a read-only pattern, a file name without an allowed suffix, or a hidden name');
  lines.push('  EDQUOT  a root\'s quota (bytes or files) would be exceeded; df on the root shows it');
  lines.push('  EFBIG   a file would grow past the root\'s largest file size');
  lines.push('  EXDEV   rename or hard link between roots; mv falls back to copy + delete');
  const withheld = [
    ...(p.privileges.setid ? [] : ['setting setuid/setgid bits']),
    ...(p.privileges.chown ? [] : ['giving a file to another user or group']),
    ...(p.privileges.devices ? [] : ['making device nodes']),
  ];
  if (withheld.length) lines.push(`  EPERM   ${withheld.join(', ')}`);
  if (session || p.roots.some((r) => limitsLine(r.config.limits))) {
    lines.push(`  EPERM   a delete or rename past this session's limit (${p.metaDir}/session shows the counts)`);
    lines.push("  EDQUOT  a file or bytes written past this session's limit");
  }
  lines.push(`${p.metaDir}/ (read-only): policy (this text), usage (per root), denials (latest refusals, newest last), session (this session and its counts against the limits)`);
  return lines.join('\n') + '\n';
}

function pct(used: number, limit: number): string {
  return limit === 0 ? '' : ` (${Math.round((used / limit) * 100)}%)`;
}

export function describeUsage(p: CompiledPolicy, usage: UsageTable): string {
  const rows: string[][] = [['root', 'mode', 'bytes used / quota', 'files used / quota']];
  for (const r of p.roots) {
    const u = usage.of(r);
    if (!u) {
      rows.push([r.path, r.mode, 'not counted (read-only, no quota)', '']);
      continue;
    }
    const q = r.quota;
    rows.push([
      r.path,
      r.mode,
      q.bytes !== undefined ? `${formatSize(u.bytes)} / ${formatSize(q.bytes)}${pct(u.bytes, q.bytes)}` : `${formatSize(u.bytes)} / unlimited`,
      q.files !== undefined ? `${u.files} / ${q.files}${pct(u.files, q.files)}` : `${u.files} / unlimited`,
    ]);
  }
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((row) => (row[i] ?? '').length))) ?? [];
  const table = rows.map((row) => row.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join('  ').trimEnd());
  // the same in exact numbers, one key=value line per counted root, for programs
  const exact = p.roots.flatMap((r) => {
    const u = usage.of(r);
    if (!u) return [];
    const q = r.quota;
    return [`${r.path} bytes=${u.bytes} files=${u.files}${q.bytes !== undefined ? ` quota_bytes=${q.bytes}` : ''}${q.files !== undefined ? ` quota_files=${q.files}` : ''}`];
  });
  return [...table, '', ...exact].join('\n') + '\n';
}

/** Which session /.ledgerfs/session describes (the journal tells the view at mount). */
export interface SessionInfo {
  /** null: --no-journal, nothing is recorded */
  id: string | null;
  mode: 'live' | 'staged';
  /** staged: the pending changes as A/M/D/R lines (paths as the program sees them) */
  pending?: () => string[];
  /** staged: read-only for review (ledgerfs freeze) */
  frozen?: () => boolean;
}

/** The mode line, and for a staged session its pending changes. */
export function describeMode(info: SessionInfo): string[] {
  if (info.mode === 'live') return ['mode: live (every change reaches the workspace at once, journaled)'];
  const pending = info.pending?.() ?? [];
  return [
    'mode: staged (changes wait in an overlay; nothing reaches the workspace until someone runs ledgerfs apply)',
    ...(info.frozen?.() ? ['frozen: yes (read-only while the changes are reviewed: every change fails with EROFS)'] : []),
    `pending changes: ${pending.length} (A added, M modified, D deleted, R renamed)`,
    ...pending.map((l) => `  ${l}`),
  ];
}

const SNAKE: Record<keyof Counts, string> = { deletes: 'deletes', renames: 'renames', filesWritten: 'files_written', bytesWritten: 'bytes_written' };

/**
 * /.ledgerfs/session: the session's id and mode, and its counts against each limit, for the
 * whole session and per writable root; a table for people, then exact `key=value` lines (as in
 * usage) for programs.
 */
export function describeSession(p: CompiledPolicy, limits: ChangeLimits, info: SessionInfo): string {
  const lines: string[] = [];
  lines.push(`session: ${info.id ?? 'none (the mount records nothing: --no-journal)'}`);
  lines.push(...describeMode(info));
  lines.push('');
  const count = (name: keyof Counts, c: Counts, tracked: boolean): string =>
    !tracked ? 'not counted (no limit)' : name === 'bytesWritten' ? formatSize(c[name]) : String(c[name]);
  const cell = (name: keyof Counts, c: Counts, max: number | undefined, tracked: boolean): string =>
    !tracked ? count(name, c, tracked) : `${count(name, c, tracked)} / ${limitText(name, max)}${max !== undefined ? pct(c[name], max) : ''}`;
  const writable = p.roots.filter((r) => r.writable);
  const header = ['limit', 'this session', ...writable.map((r) => `in ${r.path}`)];
  const rows: string[][] = [header];
  for (const [name] of LIMIT_WHAT) {
    const sessionTracked = name !== 'filesWritten' || p.config.limits.filesWritten !== undefined;
    const cells = [name, cell(name, limits.session, p.config.limits[name], sessionTracked)];
    for (const r of writable) {
      const tracked = name !== 'filesWritten' || limits.tracksFiles(r);
      cells.push(cell(name, limits.byRoot[r.index] as Counts, r.config.limits[name], tracked));
    }
    rows.push(cells);
  }
  const widths = header.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  for (const r of rows) lines.push(r.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join('  ').trimEnd());
  lines.push(`(${LIMIT_WHAT.map(([name, what]) => `${name}: ${what}`).join('; ')}; counted since the mount started)`);
  lines.push('');
  // exact numbers: one line for the session, one per writable root
  const exact = (c: Counts, l: typeof p.config.limits, tracksFiles: boolean): string =>
    LIMIT_WHAT.flatMap(([name]) => {
      if (name === 'filesWritten' && !tracksFiles) return [];
      const v = l[name];
      return [`${SNAKE[name]}=${c[name]}`, ...(v !== undefined ? [`limit_${SNAKE[name]}=${v}`] : [])];
    }).join(' ');
  lines.push(`id=${info.id ?? '-'} mode=${info.mode}`);
  lines.push(`session ${exact(limits.session, p.config.limits, p.config.limits.filesWritten !== undefined)}`);
  for (const r of writable) lines.push(`${r.path} ${exact(limits.byRoot[r.index] as Counts, r.config.limits, limits.tracksFiles(r))}`);
  return lines.join('\n') + '\n';
}

function quotePath(path: string): string {
  return /[\s"\\]/.test(path) ? JSON.stringify(path) : path;
}

export function denialLine(d: Denial): string {
  // the command goes last: the fields before it keep their places for programs that split them.
  // The reason repeats the path a program chose: printable() keeps a newline or ESC in it from
  // starting a forged refusal line (or redrawing the terminal of whoever reads this file).
  const line = `${d.time.toISOString()} pid=${d.pid ?? '-'} ${d.op} ${quotePath(d.path)} ${d.code}: ${d.reason}${d.cmd !== undefined ? ` [by ${d.cmd}]` : ''}`;
  return printable(line);
}

export function describeDenials(denials: readonly Denial[]): string {
  if (denials.length === 0) return '# no refusals yet (time pid op path errno: reason [by command line, when the pid is known]; newest last)\n';
  return denials.map(denialLine).join('\n') + '\n';
}

/** The compiled view as data, for `ledgerfs policy check --json`. */
export function policyJson(p: CompiledPolicy): unknown {
  const c = p.config;
  return {
    file: c.file,
    preset: c.preset,
    backend: c.backend,
    roots: p.roots.map((r) => ({
      path: r.path,
      source: r.source,
      mode: r.mode,
      quota: r.quota,
      maxFileBytes: r.maxFileBytes,
      suffixes: r.config.suffixes,
      hide: r.hidePatterns,
      readonly: r.readonlyPatterns,
      limits: r.config.limits,
    })),
    limits: c.limits,
    synthesized: synthesizedDirs(p),
    state: c.state,
    session: c.session,
    privileges: p.privileges,
  };
}

function synthesizedDirs(p: CompiledPolicy): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  const walk = (node: CompiledPolicy['top']) => {
    if (node.kind !== 'synth') return;
    out[node.path] = node.names;
    for (const child of node.children.values()) walk(child);
  };
  walk(p.top);
  return out;
}
