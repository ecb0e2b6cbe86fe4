import { describe, expect, it } from 'vitest';
import { parseMetricsAddr } from '../../src/app/metrics-server.js';
import { UserError } from '../../src/app/errors.js';
import { DEFAULTS } from '../../src/config/defaults.js';

describe('--metrics ADDR', () => {
  it('takes HOST:PORT, :PORT, PORT, HOST and [v6]:PORT', () => {
    expect(parseMetricsAddr('127.0.0.1:9464')).toEqual({ host: '127.0.0.1', port: 9464 });
    expect(parseMetricsAddr('0.0.0.0:0')).toEqual({ host: '0.0.0.0', port: 0 });
    expect(parseMetricsAddr(':9000')).toEqual({ host: '127.0.0.1', port: 9000 });
    expect(parseMetricsAddr('9000')).toEqual({ host: '127.0.0.1', port: 9000 });
    expect(parseMetricsAddr('localhost')).toEqual({ host: 'localhost', port: DEFAULTS.metricsPort });
    expect(parseMetricsAddr('[::1]:9464')).toEqual({ host: '::1', port: 9464 });
  });
  it('refuses what is not an address with a sentence', () => {
    for (const bad of ['host:port', '1.2.3.4:70000', 'a:b:c']) expect(() => parseMetricsAddr(bad)).toThrow(UserError);
  });
});
