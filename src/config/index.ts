/** The config layer's public surface: other layers import config/ only through this file (.dependency-cruiser.cjs). */
export * from './defaults.js';
export * from './gcs-url.js';
export * from './glob.js';
export * from './load.js';
export * from './sizes.js';
export * from './workspace-flags.js';
