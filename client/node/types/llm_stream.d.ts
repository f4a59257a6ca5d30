/**
 * @typedef {string | {text?: string, tool_call_index?: number | null, tool_call_id?: string,
 *   tool_name?: string, arguments?: string,
 *   usage?: {input_tokens: number, output_tokens: number}}} LlmDeltaInput  one piece a
 *   streaming LLM function yields: a string (text), or an object shaped like an `llm_delta`
 *   event's: `text`, or a tool call's `tool_call_index` (0-based) with `tool_call_id` and
 *   `tool_name` on its first piece and a fragment of its `arguments` JSON text; `usage` so far
 */
/** @internal Whether what an LLM function returned streams (an async iterable), rather than answers. */
export function streams(value: any): boolean;
/**
 * @internal
 * Send each piece `stream` yields as an `llm_delta` of `requestId` (through `send`, in order,
 * each written before the next is taken), and return the answer: what the generator returned
 * (a response or a string) or, when it returns nothing, the answer its pieces spell (the text
 * joined, each tool call's id, name and joined arguments JSON text, the last usage).
 * `ended()` says the session is over: the stream is then closed and no more is sent.
 */
export function streamAnswer(stream: any, requestId: any, send: any, ended: any): Promise<any>;
/**
 * one piece a
 *   streaming LLM function yields: a string (text), or an object shaped like an `llm_delta`
 *   event's: `text`, or a tool call's `tool_call_index` (0-based) with `tool_call_id` and
 *   `tool_name` on its first piece and a fragment of its `arguments` JSON text; `usage` so far
 */
export type LlmDeltaInput = string | {
    text?: string;
    tool_call_index?: number | null;
    tool_call_id?: string;
    tool_name?: string;
    arguments?: string;
    usage?: {
        input_tokens: number;
        output_tokens: number;
    };
};
