import { VfsError } from '../core/index.js';

/*
 * Which extended attributes the local store serves, by namespace, answered as ext4 answers an
 * unprivileged caller whatever the daemon's own privileges (it may run as root, and a program
 * on the mount must not reach what root could):
 *   user.*      read and written (the kernel allows them on files and directories only)
 *   security.*  read and listed (SELinux labels); set or remove: EPERM. security.capability
 *               is always absent: file capabilities through the mount would grant privileges
 *               the daemon never decided on, and the kernel asks for it before every write, so
 *               the bindings answer it themselves (ENODATA) without a trip through the core
 *   trusted.*   invisible: get ENODATA, never listed; set or remove: EPERM
 *   system.*    (POSIX ACLs among them) and unknown prefixes: EOPNOTSUPP, never listed
 */

type Namespace = 'user' | 'security' | 'trusted' | 'unsupported';

/** never reported, never set: see above */
export const FILE_CAPABILITY = 'security.capability';

function namespaceOf(name: string): Namespace {
  if (name.startsWith('user.')) return 'user';
  if (name.startsWith('security.')) return 'security';
  if (name.startsWith('trusted.')) return 'trusted';
  return 'unsupported';
}

const unsupported = (name: string, path: string) =>
  new VfsError('EOPNOTSUPP', `${path}: extended attribute ${name} is not supported (only user.* can be stored; POSIX ACLs are not)`);

/** May `name` be read? Throws what ext4 answers an unprivileged caller otherwise. */
export function checkXattrRead(name: string, path: string): void {
  switch (namespaceOf(name)) {
    case 'user':
      return;
    case 'security':
      if (name !== FILE_CAPABILITY) return;
      throw new VfsError('ENODATA', `${path} has no attribute ${name}`);
    case 'trusted':
      throw new VfsError('ENODATA', `${path} has no attribute ${name}`);
    default:
      throw unsupported(name, path);
  }
}

/** May `name` be set or removed? Throws what ext4 answers an unprivileged caller otherwise. */
export function checkXattrWrite(name: string, path: string): void {
  switch (namespaceOf(name)) {
    case 'user':
      return;
    case 'security':
    case 'trusted':
      throw new VfsError('EPERM', `${path}: ${name} can only be changed by the system administrator, not through the mount`);
    default:
      throw unsupported(name, path);
  }
}

/** The names a listing shows. */
export function listableXattr(name: string): boolean {
  const ns = namespaceOf(name);
  return ns === 'user' || (ns === 'security' && name !== FILE_CAPABILITY);
}
