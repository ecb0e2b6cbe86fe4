import { DEFAULTS, type BindingName } from '../config/index.js';
import type { Logger } from '../core/index.js';
import type { Binding } from './binding.js';
import { FuseNativeBinding } from './fuse-native-binding.js';
import { loadNativeLlAddon, NativeLlBinding } from './native-ll-binding.js';

export class BindingUnavailable extends Error {}

/**
 * The binding to mount with. A binding asked for by name must be there; the default falls back
 * to fuse-native (with a warning) when the libfuse3 addon was not built at install.
 */
export function selectBinding(requested: BindingName | undefined, log: Logger): Binding {
  const name = requested ?? DEFAULTS.binding;
  if (name === 'fuse-native') return new FuseNativeBinding();
  const addon = loadNativeLlAddon();
  if (!(addon instanceof Error)) return new NativeLlBinding();
  if (requested) throw new BindingUnavailable(addon.message);
  log.warn({ reason: addon.message }, `${name} binding unavailable; using fuse-native`);
  return new FuseNativeBinding();
}
