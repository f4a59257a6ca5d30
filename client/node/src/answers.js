// What a session answered, by call or request id: a re-attached stream may ask again.

/** How many answers are kept (the oldest go first): a stream re-asks only what is still owed. */
const KEPT = 1024;

/**
 * @internal
 * The answers a session sent and the work under way: an invocation sent again is answered
 * again with the same answer, and work under way is not started twice.
 */
export class Answers {
  /** answers sent, by call or request id */
  #sent = new Map();
  /** ids whose work is under way */
  #working = new Set();

  /**
   * Do the work for id `key` and send its answer through `send` (none when the work gives
   * null: abandoned, the sidecar no longer waits for it); an answer given already is sent
   * again, and work under way is not started twice (a re-attached stream is sent what is
   * still owed). `work` is called at once, before any await, when it is called at all.
   *
   * @param {string} key
   * @param {() => Promise<object | null>} work
   * @param {(message: object) => Promise<void>} send
   */
  async answer(key, work, send) {
    if (this.#working.has(key)) return;
    let answer = this.#sent.get(key);
    if (!answer) {
      this.#working.add(key);
      try {
        answer = await work();
      } finally {
        this.#working.delete(key);
      }
      if (answer === null) return; // abandoned: the sidecar no longer waits for it
      this.#sent.set(key, answer);
      if (this.#sent.size > KEPT) this.#sent.delete(this.#sent.keys().next().value);
    }
    await send(answer);
  }
}
