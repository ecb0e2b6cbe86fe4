/** An error meant for the person at the terminal: printed as one line, exit code 2. */
export class CliError extends Error {
  constructor(message: string, readonly exitCode = 2) {
    super(message);
  }
}
