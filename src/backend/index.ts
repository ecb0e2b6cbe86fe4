/** The backend layer's public surface: other layers import backend/ only through this file (.dependency-cruiser.cjs). */
// GCS: types here, the code behind the async doors of gcs-open.ts (loaded on first use)
export type { GcsStack, GcsStackOptions } from './gcs-stack.js';
export type * from './gcs.js';
export type * from './gcs/journal-remote.js';
export * from './gcs-open.js';
// the spool's reader is plain node (status, unmount --no-wait read a state directory's spool)
export { readSpool } from './gcs/spool-log.js';
export * from './local.js';
export * from './fd-limit.js';
export * from './sd-notify.js';
export * from './layers/staged.js';
