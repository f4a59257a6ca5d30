/**
 * @typedef {object} LlmMessage  one message of the conversation a client-hosted LLM is given
 * @property {import('./values.js').Role} role
 * @property {string} content
 * @property {import('./values.js').ToolCall[]} toolCalls  what an assistant message asked for
 * @property {string} toolCallId  the call a tool message answers
 * @property {boolean} isError  a tool message whose call failed
 */
/**
 * @typedef {object} LlmRequest  what a client-hosted LLM function receives
 * @property {string} requestId
 * @property {number} iteration
 * @property {LlmMessage[]} messages  the whole conversation, oldest first
 * @property {import('./values.js').ToolSpec[]} tools
 * @property {import('./values.js').OutputSchema | null} outputSchema  the run's output schema:
 *   a final answer (no tool calls) must be its `content` as JSON text matching it (the sidecar
 *   validates it, and sends an invalid one back with the error as a user message)
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
 * @property {Array<{id: string, name: string, arguments?: Record<string, any> | string}>} [toolCalls]
 *   `arguments`: an object, or its JSON text (passed on as it is)
 * @property {{inputTokens: number, outputTokens: number}} [usage]
 * @property {string} [refusal]  the model declined: the run ends with `STOP_REASON_REFUSAL`
 */
/** @typedef {import('./llm_stream.js').LlmDeltaInput} LlmDeltaInput */
/**
 * @internal
 * The LLM function of one session and the conversation so far: the session asks for
 * incremental messages, so each invocation brings only the messages added since the last.
 */
export class HostedLlm {
    /**
     * @param {(request: LlmRequest) => any} llm
     * @param {import('./codec.js').Codec} codec
     */
    constructor(llm: (request: LlmRequest) => any, codec: import("./codec.js").Codec);
    /**
     * Ask the LLM function and return its answer to send, or null when it was abandoned: it was
     * still answering at the invocation's deadline or the session's end (its signal aborted,
     * with every controller in `inflight`). A streaming answer's pieces go out through `send`.
     *
     * @param {any} invocation  an `LlmInvocation`
     * @param {(message: object) => Promise<void>} send
     * @param {Set<AbortController>} inflight
     */
    ask(invocation: any, send: (message: object) => Promise<void>, inflight: Set<AbortController>): Promise<{
        llm_result: {
            request_id: any;
            content: any;
            tool_calls: any;
            usage: {
                input_tokens: any;
                output_tokens: any;
                reported_total_tokens: any;
            } | null;
            refusal: any;
            error?: undefined;
        } | {
            request_id: any;
            error: string;
            content?: undefined;
            tool_calls?: undefined;
            usage?: undefined;
            refusal?: undefined;
        };
    } | null>;
    #private;
}
/**
 * one message of the conversation a client-hosted LLM is given
 */
export type LlmMessage = {
    role: import("./values.js").Role;
    content: string;
    /**
     * what an assistant message asked for
     */
    toolCalls: import("./values.js").ToolCall[];
    /**
     * the call a tool message answers
     */
    toolCallId: string;
    /**
     * a tool message whose call failed
     */
    isError: boolean;
};
/**
 * what a client-hosted LLM function receives
 */
export type LlmRequest = {
    requestId: string;
    iteration: number;
    /**
     * the whole conversation, oldest first
     */
    messages: LlmMessage[];
    tools: import("./values.js").ToolSpec[];
    /**
     * the run's output schema:
     * a final answer (no tool calls) must be its `content` as JSON text matching it (the sidecar
     * validates it, and sends an invalid one back with the error as a user message)
     */
    outputSchema: import("./values.js").OutputSchema | null;
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
    toolCalls?: {
        id: string;
        name: string;
        arguments?: Record<string, any> | string;
    }[] | undefined;
    usage?: {
        inputTokens: number;
        outputTokens: number;
    } | undefined;
    /**
     * the model declined: the run ends with `STOP_REASON_REFUSAL`
     */
    refusal?: string | undefined;
};
export type LlmDeltaInput = import("./llm_stream.js").LlmDeltaInput;
