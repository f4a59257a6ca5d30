/** Trailing metadata under which `RunToolLoop` returns a failed run's partial result. */
export const RESULT_TRAILER: "cleveragents-result-bin";
export class SidecarClient {
    /**
     * @param {string} target  `host:port` or `unix:/path`
     * @param {ClientOptions} [options]
     */
    constructor(target: string, options?: ClientOptions);
    codec: Codec;
    metadata: Record<string, string>;
    /** @type {any} The underlying grpc-js client, for anything this wrapper does not cover. */
    stub: any;
    /**
     * Close the channel, and cancel the calls still under way (they end with CANCELLED, and a
     * session with `reattach` finds nothing to re-attach with): nothing of this client is left
     * to keep the process running.
     */
    close(): void;
    /**
     * Resolve once the channel is connected (rejects after `timeoutMs`).
     *
     * @param {number} [timeoutMs]
     * @returns {Promise<void>}
     */
    waitForReady(timeoutMs?: number): Promise<void>;
    /**
     * Run the loop with the sidecar's tools and LLM; resolves with the final result (also for a
     * cancelled run: see `stopReason`). A failed run rejects with a `RunFailedError` carrying
     * the partial result; a refused request with a `SidecarError`.
     *
     * @param {string | import('./values.js').RunSpecInput} spec
     * @param {CallOptions} [options]
     * @returns {Promise<import('./values.js').ToolCallRunResult>}
     */
    runToolLoop(spec: string | import("./values.js").RunSpecInput, options?: CallOptions): Promise<import("./values.js").ToolCallRunResult>;
    /**
     * Start a run and stream its events as they happen. The call is made when iteration begins.
     *
     * @param {string | import('./values.js').RunSpecInput} spec
     * @param {CallOptions} [options]
     * @returns {EventStream}
     */
    streamToolLoop(spec: string | import("./values.js").RunSpecInput, options?: CallOptions): EventStream;
    /**
     * Follow a run by id: the events after `afterSequence` (replayed), then live ones until the
     * run ends. It follows with acknowledgements (FollowRun): an event counts as handled once
     * the next one is asked for, and the sidecar sends no more than its window ahead of that.
     * When the sidecar drops this watcher (`RESOURCE_EXHAUSTED`: it fell too far behind, or
     * stopped taking events), it reconnects from the last event it yielded, unless `resume` is
     * false; the error then carries `afterSequence` to reconnect with. With `streamDeltas`, an
     * iteration's `llmResponded` supersedes its `llmDelta`s (a preview: replace the streamed
     * text with its `content`); after a reconnection past a call's end its deltas may not come.
     *
     * @param {string} runId
     * @param {{afterSequence?: number, resume?: boolean, signal?: AbortSignal,
     *   metadata?: Record<string, string>, streamDeltas?: boolean}} [options]
     * @returns {EventStream}
     */
    watchRun(runId: string, options?: {
        afterSequence?: number;
        resume?: boolean;
        signal?: AbortSignal;
        metadata?: Record<string, string>;
        streamDeltas?: boolean;
    }): EventStream;
    /**
     * A run's state (`"RUN_STATE_RUNNING"`, `_COMPLETED`, `_FAILED`, `_CANCELLED`), the sequence
     * of its newest event, and its result once it has ended (`null` before).
     *
     * @param {string} runId
     * @returns {Promise<{runId: string, state: import('./values.js').RunState, lastSequence: number,
     *   result: import('./values.js').ToolCallRunResult | null}>}
     */
    getRun(runId: string, options?: {}): Promise<{
        runId: string;
        state: import("./values.js").RunState;
        lastSequence: number;
        result: import("./values.js").ToolCallRunResult | null;
    }>;
    /**
     * One page of a run's log (GetRunHistory): the events after `afterSequence`, oldest first,
     * as many as fit in `maxBytes` (0: the sidecar's page size), with `lastSequence` (the
     * newest event stored) and `finished` (the run had ended).
     *
     * @param {string} runId
     * @param {CallOptions & {afterSequence?: number, maxBytes?: number}} [options]
     * @returns {Promise<{events: import('./values.js').RunEvent[], lastSequence: number, finished: boolean}>}
     */
    getRunHistory(runId: string, options?: CallOptions & {
        afterSequence?: number;
        maxBytes?: number;
    }): Promise<{
        events: import("./values.js").RunEvent[];
        lastSequence: number;
        finished: boolean;
    }>;
    /**
     * Every event of a run's log after `afterSequence` that is stored now, read page by page
     * with `getRunHistory`: each page is one bounded message, so any run can be read back.
     *
     * @param {string} runId
     * @param {CallOptions & {afterSequence?: number, maxBytes?: number}} [options]
     * @returns {AsyncGenerator<import('./values.js').RunEvent, void, undefined>}
     */
    runHistory(runId: string, options?: CallOptions & {
        afterSequence?: number;
        maxBytes?: number;
    }): AsyncGenerator<import("./values.js").RunEvent, void, undefined>;
    /**
     * Cancel a live run; resolves with its state afterwards (`"RUN_STATE_CANCELLED"`, or how it
     * ended if it had already ended).
     *
     * @param {string} runId
     * @param {string} [reason]
     * @returns {Promise<import('./values.js').RunState>}
     */
    cancelRun(runId: string, reason?: string, options?: {}): Promise<import("./values.js").RunState>;
    /**
     * The sidecar's own tools.
     *
     * @returns {Promise<import('./values.js').ToolSpec[]>}
     */
    listTools(options?: {}): Promise<import("./values.js").ToolSpec[]>;
    /**
     * Run a loop whose tools live in this process. `tools` maps names to plain functions (sync
     * or async) or to `{description, inputSchema, timeout, sideEffects, idempotent, handler}`;
     * an array of named functions or definitions works too. A tool receives the inputs object and
     * a call context (`callId`, `toolName`, `iteration`, `deadline`, `idempotencyKey`,
     * `signal`) and returns any JSON value: an object is the output, anything else `x` becomes
     * `{"result": x}`. A tool
     * that throws fails its call (a record with `success: false`), and the loop goes on. A tool
     * with `sideEffects` is gated by the run's automation profile like the sidecar's own.
     *
     * `llm` is either an `LlmSelection` (`{profile, model, script}`, the sidecar's LLM) or a
     * function `(request) => response` (sync or async): then this process is the LLM. An async
     * generator function streams its answer: each piece it yields (`LlmDeltaInput`) reaches the
     * run's `streamDeltas` streams and watchers at once, and what it returns is the answer (or
     * nothing: the answer its pieces spell).
     * `approver` (sync or async) decides the run's approval requests: without one they wait for
     * a watcher, the DecideApproval RPC or the CLI.
     *
     * @param {import('./values.js').RunSpecInput & {
     *   tools?: Record<string, import('./tools.js').ToolLike> | import('./tools.js').ToolLike[],
     *   llm?: import('./values.js').RunSpecInput['llm']
     *     | ((request: import('./hosted_llm.js').LlmRequest) => any)
     *     | ((request: import('./hosted_llm.js').LlmRequest) => AsyncIterable<import('./llm_stream.js').LlmDeltaInput>),
     *   approver?: import('./approvals.js').Approver}} spec
     * @param {CallOptions & {reattach?: boolean, reattachTimeoutMs?: number}} [options]
     *   with `reattach: true`, a stream that breaks (the connection dropped, the sidecar
     *   restarted) is opened again for up to `reattachTimeoutMs` (default 60 000) from the
     *   break and re-attaches to the run after the last event seen: the same tools serve it, a
     *   call still running goes on, and one answered already is answered again, not run twice.
     * @returns {SessionRun}
     */
    session(spec: import("./values.js").RunSpecInput & {
        tools?: Record<string, import("./tools.js").ToolLike> | import("./tools.js").ToolLike[];
        llm?: import("./values.js").RunSpecInput["llm"] | ((request: import("./hosted_llm.js").LlmRequest) => any) | ((request: import("./hosted_llm.js").LlmRequest) => AsyncIterable<import("./llm_stream.js").LlmDeltaInput>);
        approver?: import("./approvals.js").Approver;
    }, options?: CallOptions & {
        reattach?: boolean;
        reattachTimeoutMs?: number;
    }): SessionRun;
    #private;
}
export type CallOptions = {
    /**
     * the call's deadline, from now; it is also the run's budget
     */
    timeoutMs?: number | undefined;
    /**
     * an absolute deadline instead (Date or epoch ms)
     */
    deadline?: number | Date | undefined;
    /**
     * aborting it cancels the call (and so its run, unless detached)
     */
    signal?: AbortSignal | undefined;
    /**
     * extra request headers
     */
    metadata?: Record<string, string> | undefined;
    /**
     * also yield the model's answer as it streams, as
     * `llmDelta` events (sequence 0); off, the stream holds the logged events only
     */
    streamDeltas?: boolean | undefined;
};
export type ClientOptions = {
    /**
     * insecure by default
     */
    credentials?: grpc.ChannelCredentials | undefined;
    /**
     * headers sent with every call
     */
    metadata?: Record<string, string> | undefined;
    /**
     * grpc-js channel options (message size
     * limits default to the sidecar's 16 MiB)
     */
    channelOptions?: Record<string, any> | undefined;
    /**
     * JSON text parser/serialiser (default: `JSON`)
     */
    json?: import("./codec.js").Json | undefined;
    /**
     * where `cleveragents/toolruntime/v1/*.proto` live
     */
    protosDir?: string | undefined;
};
/**
 * The events of a run, ending after its terminal event. `cancel()` (or leaving a `for await`
 * loop early) cancels the call. A non-OK status is thrown as a `SidecarError`. Messages are
 * read only as fast as they are consumed (gRPC flow control applies back-pressure). The call
 * asks the sidecar to batch events (`batch_events`); batches are unpacked here, so each step
 * of the iteration is still exactly one event, in sequence order.
 */
export type EventStream = AsyncGenerator<import("./values.js").RunEvent, void, undefined> & {
    cancel(): void;
};
import { Codec } from './codec.js';
import { SessionRun } from './session.js';
import grpc from '@grpc/grpc-js';
