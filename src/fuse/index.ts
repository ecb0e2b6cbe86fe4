/** The fuse layer's public surface: other layers import fuse/ only through this file (.dependency-cruiser.cjs). */
export * from './bindings.js';
export * from './mount.js';
export * from './mounts.js';
export type { OpMeter, RequestMeters } from './adapter.js';
export type { BindingStats } from './binding.js';
export type { DisplayOverrides } from './display.js';
