/** The app layer's public surface: other layers import app/ only through this file (.dependency-cruiser.cjs). */
export * from './errors.js';
export * from './mount.js';
export * from './parent-link.js';
export * from './run.js';
export * from './self.js';
export * from './workspace.js';
export * from './mount-registry.js';
export * from './daemon.js';
export * from './state-dirs.js';
export * from './upload-spool.js';
export * from './staged.js';
