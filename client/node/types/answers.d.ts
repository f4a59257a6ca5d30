/**
 * @internal
 * The answers a session sent and the work under way: an invocation sent again is answered
 * again with the same answer, and work under way is not started twice.
 */
export class Answers {
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
    answer(key: string, work: () => Promise<object | null>, send: (message: object) => Promise<void>): Promise<void>;
    #private;
}
