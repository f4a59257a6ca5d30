/**
 * A tool handler's return value as the JSON object the record will hold: objects as they
 * are, anything else `x` as `{"result": x}` (`undefined` counts as `null`), the rule the
 * sidecar's own runner applies to server-side tools.
 *
 * The sidecar does not apply it to a client's `tool_result.output`: valid JSON that is not
 * an object (`42`) becomes a failed record there. The Python client normalises before
 * sending too, so both clients give the same records.
 */
export function normaliseOutput(value: any): any;
/**
 * @typedef {object} ToolDefinition
 * @property {string} [name]  defaults to the key (object form) or the function's name
 * @property {string} [description]
 * @property {Record<string, any>} [inputSchema]  JSON Schema; omitted = any object
 * @property {number} [timeout]  milliseconds; omitted = the sidecar's default
 * @property {boolean} [sideEffects]  it may change something: an automation profile may then
 *   ask for approval before it runs (the approver decides), or forbid it
 * @property {boolean} [idempotent]  safe to run twice with the same inputs (see the README's
 *   "Durability")
 * @property {(inputs: Record<string, any>, call: ToolCallContext) => any} handler
 */
/**
 * @typedef {object} ToolCallContext
 * @property {string} callId
 * @property {string} toolName
 * @property {number} iteration
 * @property {Date | null} deadline  when the sidecar stops waiting for this call
 * @property {string} idempotencyKey  `RUN_ID:CALL_ID`, the same each time this call is invoked
 * @property {AbortSignal} signal  aborted at the deadline or when the session ends
 */
/** @typedef {((inputs: Record<string, any>, call: ToolCallContext) => any) | ToolDefinition} ToolLike */
/**
 * Tool definitions by name, from `{name: fn | definition}` or `[fn | definition]`.
 *
 * @param {Record<string, ToolLike> | ToolLike[] | undefined} tools
 * @returns {Map<string, ToolDefinition & {name: string}>}
 */
export function normaliseTools(tools: Record<string, ToolLike> | ToolLike[] | undefined): Map<string, ToolDefinition & {
    name: string;
}>;
/**
 * @internal
 * Run `invocation` (a `ToolInvocation`) with the tool it names among `tools`, and return the
 * `tool_result` message to send: the tool's output, or the error it failed with (no such
 * tool, bad inputs, a throw). Its signal aborts at the invocation's deadline, and with every
 * controller in `inflight` when the session ends.
 *
 * @param {any} invocation
 * @param {{tools: Map<string, ToolDefinition & {name: string}>, codec: import('./codec.js').Codec,
 *   inflight: Set<AbortController>}} host
 */
export function runTool(invocation: any, { tools, codec, inflight }: {
    tools: Map<string, ToolDefinition & {
        name: string;
    }>;
    codec: import("./codec.js").Codec;
    inflight: Set<AbortController>;
}): Promise<{
    tool_result: {
        call_id: any;
        output: string;
        error?: undefined;
    } | {
        call_id: any;
        error: string;
        output?: undefined;
    };
}>;
export type ToolDefinition = {
    /**
     * defaults to the key (object form) or the function's name
     */
    name?: string | undefined;
    description?: string | undefined;
    /**
     * JSON Schema; omitted = any object
     */
    inputSchema?: Record<string, any> | undefined;
    /**
     * milliseconds; omitted = the sidecar's default
     */
    timeout?: number | undefined;
    /**
     * it may change something: an automation profile may then
     * ask for approval before it runs (the approver decides), or forbid it
     */
    sideEffects?: boolean | undefined;
    /**
     * safe to run twice with the same inputs (see the README's
     * "Durability")
     */
    idempotent?: boolean | undefined;
    handler: (inputs: Record<string, any>, call: ToolCallContext) => any;
};
export type ToolCallContext = {
    callId: string;
    toolName: string;
    iteration: number;
    /**
     * when the sidecar stops waiting for this call
     */
    deadline: Date | null;
    /**
     * `RUN_ID:CALL_ID`, the same each time this call is invoked
     */
    idempotencyKey: string;
    /**
     * aborted at the deadline or when the session ends
     */
    signal: AbortSignal;
};
export type ToolLike = ((inputs: Record<string, any>, call: ToolCallContext) => any) | ToolDefinition;
