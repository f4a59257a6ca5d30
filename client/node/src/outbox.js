// A session's writes: one after another on the current stream, with back-pressure.
import { once } from 'node:events';

/**
 * @internal
 * The messages a session sends, written in the order given on the stream attached last
 * (a re-attach brings a new one), each after the one before has been taken, waiting for
 * 'drain' when the stream's buffer is full. Nothing is written once the stream is
 * half-closed or the session has ended.
 */
export class Outbox {
  /** @type {any} the current grpc-js duplex call */
  #call = null;
  #halfClosed = false;
  #closed = false;
  /** @type {Promise<void>} */
  #writes = Promise.resolve();

  /** Write to `call` from now on (a new stream: open for writing). */
  attach(call) {
    this.#call = call;
    this.#halfClosed = false;
  }

  /**
   * Queue `message`; resolves once it is written (or dropped: the stream ended).
   *
   * @param {object} message
   * @returns {Promise<void>}
   */
  send(message) {
    this.#writes = this.#writes
      .then(async () => {
        if (this.#halfClosed || this.#closed) return;
        if (!this.#call.write(message)) {
          await Promise.race([once(this.#call, 'drain'), once(this.#call, 'status')]);
        }
      })
      .catch(() => {}); // a failed write ends the call, which 'status' reports
    return this.#writes;
  }

  /** Half-close the stream after what is queued: the session has nothing more to say. */
  halfClose() {
    this.#writes = this.#writes.then(() => {
      if (this.#halfClosed || this.#closed) return;
      this.#halfClosed = true;
      this.#call.end();
    });
  }

  /** The session has ended: what is still queued is not written. */
  close() {
    this.#closed = true;
  }
}
