/** The sandbox layer's public surface: other layers import sandbox/ only through this file (.dependency-cruiser.cjs). */
export * from './bwrap.js';
export * from './seccomp.js';
