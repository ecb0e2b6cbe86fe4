import { formatSize, POLICY_PRESETS } from '../config/index.js';
import type { CompiledPolicy } from './compile.js';
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
  lines.push(`${p.metaDir}/ (read-only): policy (this text), usage (per root), denials (latest refusals, newest last)`);
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

function quotePath(path: string): string {
  return /[\s"\\]/.test(path) ? JSON.stringify(path) : path;
}

export function denialLine(d: Denial): string {
  // the command goes last: the fields before it keep their places for programs that split them
  return `${d.time.toISOString()} pid=${d.pid ?? '-'} ${d.op} ${quotePath(d.path)} ${d.code}: ${d.reason}${d.cmd !== undefined ? ` [by ${d.cmd}]` : ''}`;
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
    })),
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
