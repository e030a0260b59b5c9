// Errors thrown by maxsim. Argument errors name the argument, what was expected and what was received.

export class MaxsimError extends Error {
  override name = 'MaxsimError';
}

export class InvalidArgumentError extends MaxsimError {
  override name = 'InvalidArgumentError';
  readonly argument: string;
  readonly expected: string;
  readonly received: string;
  constructor(argument: string, expected: string, received: string) {
    super(`Expected ${expected} for ${argument} but received ${received}`);
    this.argument = argument;
    this.expected = expected;
    this.received = received;
  }
}

/** A file that is not a valid .npy / .safetensors / corpus file. */
export class FormatError extends MaxsimError {
  override name = 'FormatError';
  constructor(
    readonly file: string,
    detail: string,
  ) {
    super(`${file}: ${detail}`);
  }
}

/** A backend that cannot run here (missing native build, no GPU, ...); `reason` says why. */
export class BackendUnavailableError extends MaxsimError {
  override name = 'BackendUnavailableError';
}
