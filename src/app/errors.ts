/**
 * An error meant for the person at the terminal: one sentence that says what is wrong and what
 * to do, printed as one line by the CLI, which exits with `exitCode` (2: bad input).
 */
export class UserError extends Error {
  constructor(message: string, readonly exitCode = 2) {
    super(message);
  }
}
