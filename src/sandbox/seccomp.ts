import { createRequire } from 'node:module';
import path from 'node:path';

/*
 * The seccomp filter bwrap loads into the sandbox (--seccomp FD). libseccomp compiles it in
 * native/ledgerfs_seccomp.c (built by scripts/build-native.mjs when libseccomp-dev is there);
 * without that addon `run` refuses rather than start a sandbox unfiltered.
 */
const ADDON = path.resolve(import.meta.dirname, '../../native/build/Release/ledgerfs_seccomp.node');

/**
 * Refused with EPERM. The sandbox has no capabilities, so most of these fail anyway; the filter is
 * the second wall, and the one that holds for `--uid 0`: mounting in any form (the new mount API
 * too), leaving or entering namespaces (a new user namespace would hand back every capability
 * in it), the kernel keyring, tracing other processes, BPF, file handles (which reach files by
 * inode, past every mount), kernel modules, reboot and kexec, swap.
 */
export const REFUSED_SYSCALLS = [
  'mount', 'umount', 'umount2', 'pivot_root', 'chroot',
  'fsopen', 'fsconfig', 'fsmount', 'fspick', 'move_mount', 'open_tree', 'mount_setattr',
  'unshare', 'setns',
  'keyctl', 'add_key', 'request_key',
  'ptrace', 'process_vm_readv', 'process_vm_writev',
  'bpf',
  'open_by_handle_at', 'name_to_handle_at',
  'init_module', 'finit_module', 'delete_module',
  'reboot', 'kexec_load', 'kexec_file_load',
  'swapon', 'swapoff',
];

/** clone3's flags sit in memory a filter cannot read: ENOSYS makes the C library fall back to clone. */
export const ENOSYS_SYSCALLS = ['clone3'];

/** CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET: clone() with any of them is refused. */
export const CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000;

interface SeccompAddon {
  sandboxFilter(refused: string[], enosys: string[], cloneNamespaceFlags: number): Buffer;
}

let loaded: SeccompAddon | Error | undefined;

function addon(): SeccompAddon | Error {
  if (loaded === undefined) {
    try {
      loaded = createRequire(import.meta.url)(ADDON) as SeccompAddon;
    } catch (err) {
      loaded = err as Error;
    }
  }
  return loaded;
}

/** The sandbox's BPF program (struct sock_filter[]), or why it cannot be had, as a sentence. */
export function sandboxFilter(): Buffer | string {
  const a = addon();
  if (a instanceof Error) {
    return (
      `the sandbox's seccomp filter is not built (native/build/Release/ledgerfs_seccomp.node: ${a.message.split('\n')[0]}); ` +
      'install libseccomp-dev and rebuild: apt-get install -y libseccomp-dev && node scripts/build-native.mjs --force'
    );
  }
  try {
    return a.sandboxFilter(REFUSED_SYSCALLS, ENOSYS_SYSCALLS, CLONE_NAMESPACE_FLAGS);
  } catch (err) {
    // e.g. a libseccomp too old to know a system call of the list: no filter rather than a weaker one
    return `the sandbox's seccomp filter cannot be made (${(err as Error).message}); a newer libseccomp (2.5.2 or later) is needed`;
  }
}
