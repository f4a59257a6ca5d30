/**
 * @typedef {string | {text?: string, toolCallIndex?: number | null, toolCallId?: string,
 *   toolName?: string, arguments?: string,
 *   usage?: {inputTokens: number, outputTokens: number}}} LlmDeltaInput  one piece a
 *   streaming LLM function yields: a string (text), or an object shaped like an `llmDelta`
 *   event's: `text`, or a tool call's `toolCallIndex` (0-based) with `toolCallId` and
 *   `toolName` on its first piece and a fragment of its `arguments` JSON text; `usage` so far
 */
/**
 * @internal
 * A wire `Usage` from `{inputTokens, outputTokens}` (`null` for none).
 *
 * @param {{inputTokens?: number, outputTokens?: number, reportedTotalTokens?: number} | null | undefined} usage
 */
export function wireUsage(usage: {
    inputTokens?: number;
    outputTokens?: number;
    reportedTotalTokens?: number;
} | null | undefined): {
    input_tokens: any;
    output_tokens: any;
    reported_total_tokens: any;
} | null;
/** @internal Whether what an LLM function returned streams (an async iterable), rather than answers. */
export function streams(value: any): boolean;
/**
 * @internal
 * Send each piece `stream` yields as a delta of `requestId` (through `send`, in order), and
 * return the answer: what the generator returned (a response or a string) or, when it returns
 * nothing, the answer its pieces spell (the text joined, each tool call's id, name and joined
 * arguments JSON text, the last usage). With `batches` (the invocation's
 * `accepts_delta_batches`), the pieces taken while the last message was being written go
 * together in the next, an `llm_deltas` of up to `MAX_DELTAS_A_MESSAGE` (one alone goes as an
 * `llm_delta`); without it each goes in an `llm_delta` of its own. No more than that many
 * are taken ahead of what is written, and the answer waits for them all.
 *
 * The stream is closed (`return()`, so a generator's `finally` runs) whenever it is left
 * before its end: a bad piece, a failed send, or `signal` aborting (the invocation's deadline,
 * the session's end), which also stops the wait for a piece at once. A generator stalled in an
 * `await` is closed when that await settles: given the request's signal, its fetch ends then.
 *
 * @param {AsyncIterable<any>} stream
 * @param {string} requestId
 * @param {(message: object) => Promise<void>} send
 * @param {AbortSignal} signal
 * @param {boolean} [batches]
 */
export function streamAnswer(stream: AsyncIterable<any>, requestId: string, send: (message: object) => Promise<void>, signal: AbortSignal, batches?: boolean): Promise<any>;
/** @internal The most pieces one message carries when an LLM streams faster than they are written. */
export const MAX_DELTAS_A_MESSAGE: 256;
/**
 * one piece a
 *   streaming LLM function yields: a string (text), or an object shaped like an `llmDelta`
 *   event's: `text`, or a tool call's `toolCallIndex` (0-based) with `toolCallId` and
 *   `toolName` on its first piece and a fragment of its `arguments` JSON text; `usage` so far
 */
export type LlmDeltaInput = string | {
    text?: string;
    toolCallIndex?: number | null;
    toolCallId?: string;
    toolName?: string;
    arguments?: string;
    usage?: {
        inputTokens: number;
        outputTokens: number;
    };
};
