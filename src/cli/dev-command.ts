import type { Command } from 'commander';
import { UserError } from '../app/index.js';

/**
 * `ledgerfs dev ...`: tools for developing against ledgerfs. For now the GCS JSON-API
 * emulator, which the tests and .ci/run also use (see src/dev/gcs-emulator/README.md).
 */
export function registerDevCommand(program: Command): void {
  const dev = program.command('dev').description('Development tools (a GCS emulator for trying the GCS backend locally).');
  dev
    .command('gcs-emulator')
    .description('Serve an in-memory GCS JSON API on 127.0.0.1 until SIGINT/SIGTERM (no authentication; data is lost on exit).')
    .option('--port <n>', 'port to listen on (0: any free port)', '4443')
    .option('--bucket <name...>', 'create these buckets at start (or create them with POST /storage/v1/b, as against GCS)')
    .option('--verbose', 'log every request on stderr', false)
    .option('--object-rate-limit <perSecond[,burst]>', "answer 429 rateLimitExceeded past this many writes (and, separately, metadata updates) per second to one object name, as GCS may (its documented limit: 1 per second); default: unlimited")
    .addHelpText(
      'after',
      `
Prints one JSON line {"url":...,"port":...} once listening. Point the GCS backend at it with
  backend: { type: gcs, bucket: NAME, apiEndpoint: http://127.0.0.1:4443 }
or any @google-cloud/storage client with new Storage({ apiEndpoint: 'http://127.0.0.1:4443' }).
Faults for testing: POST /_emulator/faults {"status":503,"count":2,"pathPrefix":"/upload/"}.

Example:
  ledgerfs dev gcs-emulator --port 4443 --bucket ws &`,
    )
    .action(async (o: { port: string; bucket?: string[]; verbose: boolean; objectRateLimit?: string }) => {
      const port = Number(o.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UserError(`--port must be 0..65535, got ${JSON.stringify(o.port)}`);
      const [perSecond = NaN, burst = 1] = o.objectRateLimit !== undefined ? o.objectRateLimit.split(',').map(Number) : [];
      if (o.objectRateLimit !== undefined && !(perSecond > 0 && burst >= 1)) {
        throw new UserError(`--object-rate-limit takes PER_SECOND[,BURST], a rate above 0 and a burst of at least 1 (GCS documents 1 per second), got ${JSON.stringify(o.objectRateLimit)}`);
      }
      // the emulator's modules load only for this command, not on every start of the CLI
      const { startGcsEmulator } = await import('../dev/index.js');
      let emu;
      try {
        emu = await startGcsEmulator({ port, ...(o.objectRateLimit !== undefined ? { objectRateLimit: { perSecond, burst } } : {}), ...(o.verbose ? { log: (l: string) => process.stderr.write(l + '\n') } : {}) });
      } catch (err) {
        throw new UserError(`cannot listen on 127.0.0.1:${port}: ${(err as Error).message}`);
      }
      try {
        for (const b of o.bucket ?? []) emu.store.createBucket(b, '');
      } catch (err) {
        await emu.stop();
        throw new UserError(`--bucket: ${(err as Error).message}`);
      }
      process.stdout.write(JSON.stringify({ url: emu.url, port: emu.port, buckets: o.bucket ?? [] }) + '\n');
      await new Promise<void>((resolve) => {
        const stop = () => {
          process.off('SIGINT', stop);
          process.off('SIGTERM', stop);
          void emu.stop().then(resolve);
        };
        process.on('SIGINT', stop);
        process.on('SIGTERM', stop);
      });
    });
}
