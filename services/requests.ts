/** What every application service takes from its callers: who asks, and how a bad request is refused. */

/** The person (or the operator) a request comes from. */
export interface Requester {
  id: string;
  name: string;
}

/** A request a service refuses: the message is for the caller, the status for the HTTP API. */
export class ServiceInputError extends Error {
  constructor(
    message: string,
    readonly status: 400 | 404 | 409 = 400,
  ) {
    super(message);
  }
}
