/** The set-id bits of a mode, and what the kernel keeps of them when a file changes hands or bytes. */

export const S_ISUID = 0o4000;
export const S_ISGID = 0o2000;
export const S_IXGRP = 0o010;

/**
 * `mode` once a write, truncate or chown by someone without CAP_FSETID has dropped setuid and
 * setgid: setuid always, setgid only with group execute (without it, it marks mandatory
 * locking), as the kernel's should_remove_suid does on a local disk. Under FUSE's killpriv v2
 * the file system applies this itself (src/fuse/native-ll-binding.ts).
 */
export function withoutSetid(mode: number): number {
  let m = mode & ~S_ISUID;
  if (m & S_IXGRP) m &= ~S_ISGID;
  return m;
}
