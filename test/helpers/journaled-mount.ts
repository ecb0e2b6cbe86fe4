import path from 'node:path';
import { startMount, type StartOptions, type TestMount } from './mount.js';
import { makeTemp, rmTemp } from './tmp.js';

export interface JournaledMount {
  m: TestMount;
  /** the journal's state directory (`--state`), for CLI commands such as rollback */
  state: string;
  /** stop the daemon, remove the state (and kept source); the error lines the daemon logged */
  finish(): Promise<string[]>;
}

/**
 * A mount journaling as `session` into a state directory of its own temp dir. With
 * `keepSource` the source lives there too, so it outlives stop() (a rollback of the unmounted
 * workspace).
 */
export async function startJournaledMount(session: string, opts: StartOptions & { keepSource?: boolean } = {}): Promise<JournaledMount> {
  const root = makeTemp('state');
  const state = path.join(root, 'state');
  let m: TestMount;
  try {
    m = await startMount({
      ...opts,
      ...(opts.keepSource ? { src: path.join(root, 'src') } : {}),
      args: ['--state', state, '--session', session, ...(opts.args ?? [])],
    });
  } catch (err) {
    rmTemp(root);
    throw err;
  }
  return {
    m,
    state,
    async finish() {
      const errors = m.errors();
      try {
        await m.stop();
      } finally {
        rmTemp(root);
      }
      return errors;
    },
  };
}
