// The calls of a client still under way, so that closing the client ends them: grpc-js's own
// close() lets them run on, and each holds the connection (a handle that keeps the process up).

/**
 * @internal
 * The calls opened and not yet ended (each ends with its 'status' event).
 */
export class OpenCalls {
  #calls = new Set();

  /**
   * Track `call` until its status comes; returns it.
   *
   * @template {{cancel(): void, once(event: 'status', listener: () => void): any}} C
   * @param {C} call
   * @returns {C}
   */
  track(call) {
    this.#calls.add(call);
    call.once('status', () => this.#calls.delete(call));
    return call;
  }

  /** Cancel every call still under way: each ends with CANCELLED. */
  cancelAll() {
    const calls = [...this.#calls];
    this.#calls.clear();
    for (const call of calls) call.cancel();
  }
}
