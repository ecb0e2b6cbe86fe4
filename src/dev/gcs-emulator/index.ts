export { startGcsEmulator, type GcsEmulator, type GcsEmulatorOptions, type EmulatorStats } from './server.js';
export { EmulatorStore } from './store.js';
export type { FaultSpec, FaultRule } from './faults.js';
