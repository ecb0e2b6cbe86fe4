/** The vfs layer's public surface: other layers import vfs/ only through this file (.dependency-cruiser.cjs). */
export * from './pipeline.js';
export * from './vfs.js';
