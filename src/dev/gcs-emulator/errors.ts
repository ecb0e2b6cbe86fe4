/**
 * Errors shaped like the GCS JSON API's: `{"error": {"code", "message", "errors": [{"message",
 * "domain", "reason", ...}]}}`. The client turns this body into an ApiError whose `code` is the
 * HTTP status and whose `errors[0].reason` callers may inspect, so the reasons matter.
 */
export class EmulatorError extends Error {
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
    readonly extra: { locationType?: string; location?: string } = {},
  ) {
    super(message);
  }

  toJSON(): unknown {
    return {
      error: {
        code: this.status,
        message: this.message,
        errors: [{ message: this.message, domain: 'global', reason: this.reason, ...this.extra }],
      },
    };
  }
}

export const noSuchObject = (bucket: string, name: string) =>
  new EmulatorError(404, 'notFound', `No such object: ${bucket}/${name}`);

export const noSuchBucket = (bucket: string) =>
  new EmulatorError(404, 'notFound', `The specified bucket does not exist: ${bucket}`);

export const preconditionFailed = (which: string) =>
  new EmulatorError(412, 'conditionNotMet', `At least one of the pre-conditions you specified did not hold. (${which})`, {
    locationType: 'header',
    location: 'If-Match',
  });

export const notModified = () => new EmulatorError(304, 'notModified', 'Not Modified');

export const badRequest = (message: string, reason = 'invalid') => new EmulatorError(400, reason, message);

export const conflict = (message: string) => new EmulatorError(409, 'conflict', message);
