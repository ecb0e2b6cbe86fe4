/** The core layer's public surface: other layers import core/ only through this file (.dependency-cruiser.cjs). */
export * from './backend.js';
export * from './clock.js';
export * from './durable-file.js';
export * from './remove-file.js';
export * from './find-on-path.js';
export * from './errors.js';
export * from './latency-counts.js';
export * from './log.js';
export * from './mode-bits.js';
export * from './mutation.js';
export * from './names.js';
export * from './paths.js';
export * from './process-names.js';
