/** The policy layer's public surface: other layers import policy/ only through this file (.dependency-cruiser.cjs). */
export * from './compile.js';
export * from './denials.js';
export * from './describe.js';
export * from './limits.js';
export * from './stage.js';
export * from './usage.js';
export * from './view.js';
export * from './privileges.js';
