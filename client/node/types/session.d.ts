/**
 * One session run. Iterate it for the run's events (`for await (const event of run)`), or
 * just `await run.result`; both work, and the tools are answered either way.
 *
 * The stream is read as fast as it arrives, so that tool invocations are answered at once
 * even while the code iterating the events is busy: events wait in memory for the iterator
 * (at most one run's worth, the same log the sidecar itself keeps).
 *
 * The session asks for batched events: one message may carry several events and then an
 * invocation. The events are queued first, in order, and the invocation starts right after,
 * without waiting for the iterator to take them, as when each came in a message of its own.
 */
export class SessionRun {
    /** @internal */
    constructor({ openCall, codec, tools, llm, approver, start, reattach, reattachTimeoutMs }: {
        openCall: any;
        codec: any;
        tools: any;
        llm: any;
        approver?: null | undefined;
        start: any;
        reattach?: boolean | undefined;
        reattachTimeoutMs?: number | undefined;
    });
    /** @type {string | null} the run's id, known from its `runStarted` event on */
    runId: string | null;
    /**
     * The run's result: resolves on `runCompleted` and `runCancelled` (see `stopReason`),
     * rejects with a `RunFailedError` on `runFailed`, and with a `SidecarError` when the
     * stream ends with a non-OK status (its `result` is the partial result if one was sent).
     *
     * @returns {Promise<import('./values.js').ToolCallRunResult>}
     */
    get result(): Promise<import("./values.js").ToolCallRunResult>;
    /** Ask the sidecar to cancel the run; it ends with `runCancelled` carrying `reason`. */
    cancel(reason?: string): Promise<void>;
    /**
     * Give the run up: the sidecar is asked to cancel it, and the stream is dropped once the
     * run has ended (at most a few seconds later); `result` rejects with CANCELLED. (A stream
     * merely dropped would leave the run waiting for a re-attach, see `session_reattach_s`.)
     */
    abort(): void;
    /** @returns {AsyncIterator<import('./values.js').RunEvent>} */
    [Symbol.asyncIterator](): AsyncIterator<import("./values.js").RunEvent>;
    #private;
}
