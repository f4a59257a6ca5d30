/**
 * @typedef {object} LlmRequest  what a client-hosted LLM function receives
 * @property {string} request_id
 * @property {number} iteration
 * @property {Array<{role: string, content: string, tool_calls: import('./codec.js').ToolCall[],
 *   tool_call_id: string, is_error: boolean}>} messages  the whole conversation, oldest first
 * @property {import('./codec.js').ToolSpec[]} tools
 * @property {Date | null} deadline  when the sidecar stops waiting for the answer
 *   (`client_llm_timeout_s` after it asked)
 * @property {AbortSignal} signal  aborts at `deadline` or when the session ends: pass it on
 *   (to `fetch`, say) so that the work stops then. An answer still pending then is abandoned:
 *   not sent, and a streaming generator is closed (its `finally` runs).
 */
/**
 * @typedef {object} LlmResponse  what a client-hosted LLM function returns (or a string: the
 *   content). An async generator function streams instead: it yields `LlmDeltaInput` pieces,
 *   which reach the run's `streamDeltas` streams as they come, and returns the whole answer, or
 *   nothing for the answer its pieces spell.
 * @property {string} [content]
 * @property {Array<{id: string, name: string, arguments?: Record<string, any> | string}>} [tool_calls]
 *   `arguments`: an object, or its JSON text (passed on as it is)
 * @property {{input_tokens: number, output_tokens: number}} [usage]
 */
/** @typedef {import('./llm_stream.js').LlmDeltaInput} LlmDeltaInput */
/**
 * @typedef {boolean | {approved: boolean, reason?: string}} ApprovalAnswer  an approver's
 *   decision: `true`/`false`, or an object with a reason (the model sees a denial's reason)
 */
/**
 * @typedef {(request: import('./codec.js').ApprovalRequest & {run_id: string, signal: AbortSignal})
 *   => ApprovalAnswer | Promise<ApprovalAnswer>} Approver  decides this session's approval
 *   requests; `signal` aborts when the session ends. Anything but `true` or an object with
 *   `approved: true` denies, and so does an approver that throws (saying why).
 */
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
    /** @type {string | null} the run's id, known from its `run_started` event on */
    runId: string | null;
    /**
     * The run's result: resolves on `run_completed` and `run_cancelled` (see `stop_reason`),
     * rejects with a `RunFailedError` on `run_failed`, and with a `SidecarError` when the
     * stream ends with a non-OK status (its `result` is the partial result if one was sent).
     *
     * @returns {Promise<import('./codec.js').ToolCallRunResult>}
     */
    get result(): Promise<import("./codec.js").ToolCallRunResult>;
    /** Ask the sidecar to cancel the run; it ends with `run_cancelled` carrying `reason`. */
    cancel(reason?: string): Promise<void>;
    /**
     * Give the run up: the sidecar is asked to cancel it, and the stream is dropped once the
     * run has ended (at most a few seconds later); `result` rejects with CANCELLED. (A stream
     * merely dropped would leave the run waiting for a re-attach, see `session_reattach_s`.)
     */
    abort(): void;
    /** @returns {AsyncIterator<import('./codec.js').RunEvent>} */
    [Symbol.asyncIterator](): AsyncIterator<import("./codec.js").RunEvent>;
    #private;
}
/**
 * what a client-hosted LLM function receives
 */
export type LlmRequest = {
    request_id: string;
    iteration: number;
    /**
     * the whole conversation, oldest first
     */
    messages: Array<{
        role: string;
        content: string;
        tool_calls: import("./codec.js").ToolCall[];
        tool_call_id: string;
        is_error: boolean;
    }>;
    tools: import("./codec.js").ToolSpec[];
    /**
     * when the sidecar stops waiting for the answer
     * (`client_llm_timeout_s` after it asked)
     */
    deadline: Date | null;
    /**
     * aborts at `deadline` or when the session ends: pass it on
     * (to `fetch`, say) so that the work stops then. An answer still pending then is abandoned:
     * not sent, and a streaming generator is closed (its `finally` runs).
     */
    signal: AbortSignal;
};
/**
 * what a client-hosted LLM function returns (or a string: the
 *   content). An async generator function streams instead: it yields `LlmDeltaInput` pieces,
 *   which reach the run's `streamDeltas` streams as they come, and returns the whole answer, or
 *   nothing for the answer its pieces spell.
 */
export type LlmResponse = {
    content?: string | undefined;
    /**
     * `arguments`: an object, or its JSON text (passed on as it is)
     */
    tool_calls?: {
        id: string;
        name: string;
        arguments?: Record<string, any> | string;
    }[] | undefined;
    usage?: {
        input_tokens: number;
        output_tokens: number;
    } | undefined;
};
export type LlmDeltaInput = import("./llm_stream.js").LlmDeltaInput;
/**
 * an approver's
 *   decision: `true`/`false`, or an object with a reason (the model sees a denial's reason)
 */
export type ApprovalAnswer = boolean | {
    approved: boolean;
    reason?: string;
};
/**
 * decides this session's approval
 *   requests; `signal` aborts when the session ends. Anything but `true` or an object with
 *   `approved: true` denies, and so does an approver that throws (saying why).
 */
export type Approver = (request: import("./codec.js").ApprovalRequest & {
    run_id: string;
    signal: AbortSignal;
}) => ApprovalAnswer | Promise<ApprovalAnswer>;
