import { spawnSync } from 'node:child_process';
import { localAddon } from './local-addon.js';

/*
 * systemd's readiness protocol (Type=notify): a datagram to $NOTIFY_SOCKET. The local addon
 * sends it from this process (native/ledgerfs_notify.c), which systemd's default
 * NotifyAccess=main requires. Without the addon, `systemd-notify --pid=` speaks for this
 * process: systemd takes that from root only (it needs to claim another pid).
 */
interface Addon {
  sdNotify(state: string): boolean;
}

/** 'sent'; 'no-socket' when not started by systemd (no $NOTIFY_SOCKET); else why it failed. */
export function sdNotify(state: string): 'sent' | 'no-socket' | { error: string } {
  if (!process.env.NOTIFY_SOCKET) return 'no-socket';
  const addon = localAddon() as Partial<Addon> | null;
  if (typeof addon?.sdNotify === 'function') {
    try {
      return addon.sdNotify(state) ? 'sent' : 'no-socket';
    } catch (err) {
      return { error: `${(err as Error).message} (${(err as NodeJS.ErrnoException).code ?? 'error'}), NOTIFY_SOCKET=${process.env.NOTIFY_SOCKET}` };
    }
  }
  const r = spawnSync('systemd-notify', [`--pid=${process.pid}`, ...state.split('\n').filter(Boolean)], { encoding: 'utf8', timeout: 5000 });
  if (r.error) return { error: `the native addon is not built and systemd-notify could not run: ${r.error.message}` };
  return r.status === 0 ? 'sent' : { error: `systemd-notify exited ${r.status}: ${r.stderr.trim()}` };
}
