import { pathToFileURL } from 'node:url';
import { startGcsEmulator } from './server.js';

/**
 * `node dist/dev/gcs-emulator/main.js [--port N] [--host H] [--bucket NAME]... [--verbose] [--object-rate-limit PER_SECOND[,BURST]] [--exit-with-stdin]`:
 * run the emulator in the foreground until SIGINT/SIGTERM. Prints one JSON line with the URL
 * once listening, so scripts can wait for it and read the port.
 */
export async function runGcsEmulatorCli(argv: string[]): Promise<void> {
  let port = 0;
  let host = '127.0.0.1';
  let verbose = false;
  let lifeline = false;
  let objectRateLimit: { perSecond: number; burst: number } | undefined;
  const buckets: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a === '--port') port = Number(next());
    else if (a === '--host') host = next();
    else if (a === '--bucket') buckets.push(next());
    else if (a === '--verbose') verbose = true;
    else if (a === '--exit-with-stdin') lifeline = true;
    else if (a === '--object-rate-limit') {
      const [perSecond, burst = 1] = next().split(',').map(Number);
      if (!(perSecond! > 0) || !(burst >= 1)) throw new Error('--object-rate-limit needs PER_SECOND[,BURST]: a rate above 0 and a burst of at least 1 (GCS: 1 per second per object)');
      objectRateLimit = { perSecond: perSecond!, burst };
    }
    else if (a === '--help' || a === '-h') {
      process.stdout.write('usage: gcs-emulator [--port N] [--host 127.0.0.1] [--bucket NAME]... [--verbose] [--object-rate-limit PER_SECOND[,BURST]] [--exit-with-stdin]\n');
      return;
    } else throw new Error(`unknown argument ${a}`);
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`invalid --port`);
  const emu = await startGcsEmulator({ port, host, ...(objectRateLimit ? { objectRateLimit } : {}), ...(verbose ? { log: (l: string) => process.stderr.write(l + '\n') } : {}) });
  try {
    for (const b of buckets) emu.store.createBucket(b, '');
  } catch (err) {
    await emu.stop();
    throw err;
  }
  process.stdout.write(JSON.stringify({ url: emu.url, port: emu.port, buckets }) + '\n');
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      void emu.stop().then(resolve);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
    // --exit-with-stdin: stop when the process that started us closes our stdin or dies (tests:
    // no emulator outlives a killed test worker)
    if (lifeline) process.stdin.on('end', stop).on('error', stop).resume();
  });
  if (lifeline) process.stdin.destroy(); // let the process end now that the server is closed
}

// Run when executed directly (not when imported by the ledgerfs CLI).
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  runGcsEmulatorCli(process.argv.slice(2)).catch((err: Error) => {
    process.stderr.write(`gcs-emulator: ${err.message}\n`);
    process.exit(2);
  });
}
