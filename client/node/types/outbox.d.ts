/**
 * @internal
 * The messages a session sends, written in the order given on the stream attached last
 * (a re-attach brings a new one), each after the one before has been taken, waiting for
 * 'drain' when the stream's buffer is full. Nothing is written once the stream is
 * half-closed or the session has ended.
 */
export class Outbox {
    /** Write to `call` from now on (a new stream: open for writing). */
    attach(call: any): void;
    /**
     * Queue `message`; resolves once it is written (or dropped: the stream ended).
     *
     * @param {object} message
     * @returns {Promise<void>}
     */
    send(message: object): Promise<void>;
    /** Half-close the stream after what is queued: the session has nothing more to say. */
    halfClose(): void;
    /** The session has ended: what is still queued is not written. */
    close(): void;
    #private;
}
