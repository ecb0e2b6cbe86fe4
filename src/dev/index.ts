/** The dev layer's public surface: other layers import dev/ only through this file (.dependency-cruiser.cjs). */
export * from './gcs-emulator/index.js';
