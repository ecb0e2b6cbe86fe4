/** The backend layer's public surface: other layers import backend/ only through this file (.dependency-cruiser.cjs). */
export * from './gcs-stack.js';
export * from './gcs.js';
export * from './gcs/journal-remote.js';
export * from './local.js';
export * from './fd-limit.js';
export * from './sd-notify.js';
export * from './layers/staged.js';
