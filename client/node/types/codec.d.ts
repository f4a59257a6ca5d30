/**
 * The wire `RunEvent`s one streamed response carries, oldest first: those batched in its
 * repeated `events` field, then its single `event`, if set. This reads every response this
 * client streams (`StreamToolLoopResponse`, `WatchRunResponse`, `SessionResponse`), batched
 * or not: an unset repeated field is `[]` (proto-loader's `defaults`), an unset message field
 * `null`, and a `SessionResponse` whose `kind` is not `event` has no `event` key at all.
 * (The sidecar never sets both fields; the order is the one `SessionResponse` documents.)
 *
 * @param {{events?: any[] | null, event?: any}} response
 * @returns {any[]}
 */
export function wireEvents(response: {
    events?: any[] | null;
    event?: any;
}): any[];
/**
 * @typedef {{parse: (text: string) => any, stringify: (value: any) => string | undefined}} Json
 *   How JSON text is read and written. The default is the global `JSON`, which turns integers
 *   beyond 2^53 into approximate numbers; plug in a lossless parser if your tools need them.
 */
/** @typedef {{input_tokens: number, output_tokens: number, reported_total_tokens: number}} Usage */
/**
 * @typedef {{provider: string, summary: string, items: string, items_omitted: boolean,
 *   items_bytes: number}} Reasoning  a reasoning model's summary and its provider's opaque
 *   items (JSON text), as `llm_responded` carries them (see types.proto)
 */
/**
 * @typedef {object} ToolCallRecord
 * @property {string} tool_name
 * @property {Record<string, any>} inputs
 * @property {Record<string, any>} output  `{}` when the call failed
 * @property {number} duration_ms
 * @property {boolean} success
 * @property {string | null} error  `null` when the call succeeded
 * @property {number} iteration
 * @property {string} call_id
 * @property {Date | null} started_at
 * @property {string} error_kind  an `ErrorKind` name, `"ERROR_KIND_UNSPECIFIED"` on success
 */
/**
 * @typedef {object} ToolCallRunResult
 * @property {string} run_id
 * @property {string} content
 * @property {ToolCallRecord[]} tool_call_history
 * @property {number} iterations
 * @property {boolean} terminated_by_limit
 * @property {Usage | null} usage
 * @property {string} stop_reason  a `StopReason` name, such as `"STOP_REASON_FINAL_ANSWER"`
 */
/**
 * @typedef {object} ToolCall
 * @property {string} id
 * @property {string} name
 * @property {Record<string, any>} arguments
 */
/**
 * @typedef {object} ToolSpec
 * @property {string} name
 * @property {string} description
 * @property {Record<string, any>} input_schema  a JSON Schema object
 * @property {number | null} timeout  milliseconds, `null` for the server's default
 * @property {boolean} [side_effects]  whether it may change something (what approvals ask about)
 * @property {string} [origin]  where the sidecar's tool comes from: `mcp:NAME` for an MCP
 *   server's, empty for its own (in `listTools`)
 */
/**
 * @typedef {object} RunEvent
 * @property {string} run_id
 * @property {number} sequence  1, 2, 3… per run, no gaps; 0 for an `llm_delta` (live, not logged)
 * @property {Date | null} time
 * @property {'run_started' | 'iteration_started' | 'llm_delta' | 'llm_responded'
 *   | 'tool_call_started' | 'tool_call_progress' | 'tool_call_completed' | 'approval_requested'
 *   | 'approval_decided' | 'run_completed' | 'run_failed' | 'run_cancelled' | 'run_resumed'} payload
 *   which payload field is set; that field holds the event's data
 * @property {{spec: Record<string, any>}} [run_started]
 * @property {{iteration: number}} [iteration_started]
 * @property {LlmDelta} [llm_delta]  only on a stream that asked for deltas (`streamDeltas`)
 * @property {{iteration: number, content: string, tool_calls: ToolCall[], usage: Usage | null,
 *   reasoning: Reasoning | null}} [llm_responded]  supersedes its iteration's deltas
 * @property {{call_id: string, tool_name: string, inputs: Record<string, any>, iteration: number}} [tool_call_started]
 * @property {ToolCallProgress} [tool_call_progress]
 * @property {{record: ToolCallRecord}} [tool_call_completed]
 * @property {ApprovalRequest & {how_to_answer: string}} [approval_requested]
 * @property {{call_id: string, approved: boolean, reason: string, decided_by: string,
 *   iteration: number, identity: string}} [approval_decided]  `decided_by`: session, rpc,
 *   timeout or policy; `identity`: who decided (empty for timeout and policy)
 * @property {{result: ToolCallRunResult}} [run_completed]
 * @property {{code: number, message: string, result: ToolCallRunResult}} [run_failed]
 * @property {{reason: string, result: ToolCallRunResult}} [run_cancelled]
 * @property {{after_sequence: number, iteration: number, reason: string,
 *   rerun_call_ids: string[], interrupted_call_ids: string[]}} [run_resumed]
 *   the run goes on after its sidecar restarted
 */
/**
 * @typedef {object} ToolCallProgress  how far a call in flight has got (an MCP server's
 *   progress notifications, coalesced by the sidecar)
 * @property {string} call_id
 * @property {string} tool_name
 * @property {number} progress  in the tool's own units
 * @property {number | null} total  where it will be done; `null` when the tool does not know
 * @property {string} message  may be empty
 * @property {number} iteration
 */
/**
 * @typedef {object} LlmDelta  a piece of an LLM answer while it streams (see events.proto)
 * @property {number} iteration
 * @property {string} text  appended to the answer's content (tool_call_index null)
 * @property {number | null} tool_call_index  the tool call it extends, or null for text
 * @property {string} tool_call_id  on each tool call's first delta
 * @property {string} tool_name  on each tool call's first delta
 * @property {string} arguments  a fragment of the call's arguments JSON text
 * @property {Usage | null} usage
 * @property {number} after_sequence  the logged event it follows (its iteration_started)
 * @property {number} index  the position among the call's deltas of the first it holds
 * @property {number} count  how many it holds (more than 1 when the sidecar coalesced them)
 */
/**
 * @typedef {object} ApprovalRequest  a tool call that waits for approval
 * @property {string} call_id
 * @property {string} tool_name
 * @property {Record<string, any>} inputs  what it would run with
 * @property {number} iteration
 * @property {string} reason  why approval is needed (which profile, which rule)
 */
/**
 * @typedef {object} RunSpecInput  a `RunSpec`, with its JSON fields as plain values
 * @property {string} prompt
 * @property {Record<string, any>} [context]  a `ToolActorContext`
 * @property {number} [max_iterations]  0 = the server's default (25)
 * @property {{profile?: string, model?: string, script?: any[] | string}} [llm]
 *   `script`: the scripted LLM's turns, as an array (or its JSON text)
 * @property {string[]} [tool_names]
 * @property {string} [run_id]
 * @property {boolean} [detach]
 */
export const TERMINAL: readonly string[];
export class Codec {
    /** @param {Json} json */
    constructor(json: Json);
    json: Json;
    /** Parse a JSON text field; `empty` is what empty text means. */
    parse(text: any, field: any, empty?: {}): any;
    /** JSON text for a value; `undefined` and `null` become empty text (the field's default). */
    stringify(value: any, field: any): string;
    /**
     * A wire `RunSpec` from a prompt or a `RunSpecInput`. Unknown keys are rejected, so a
     * camelCase `maxIterations` is an error rather than silently ignored.
     *
     * @param {string | RunSpecInput} input
     * @param {Set<string>} [extra] keys the caller handles itself
     */
    encodeSpec(input: string | RunSpecInput, extra?: Set<string>): {
        prompt: string;
        max_iterations: number;
        tool_names: string[];
        run_id: string;
        detach: boolean;
    };
    encodeContext(context: any): {
        plan_id: any;
        phase: any;
        sandbox_root: any;
        automation_profile: any;
        resource_bindings: string;
        project_resources: string;
        tool_call_history: any;
    };
    /** @param {ToolCallRecord} record */
    encodeRecord(record: ToolCallRecord): {
        inputs: string;
        output: string;
        started_at: {
            seconds: number;
            nanos: number;
        } | null;
        tool_name: string;
        duration_ms: number;
        success: boolean;
        /**
         * `null` when the call succeeded
         */
        error: string | null;
        iteration: number;
        call_id: string;
        /**
         * an `ErrorKind` name, `"ERROR_KIND_UNSPECIFIED"` on success
         */
        error_kind: string;
    };
    /** A wire `ToolSpec` from a tool definition (see `normaliseTools` in tools.js). */
    encodeToolSpec(tool: any): {
        name: any;
        description: any;
        input_schema: string;
        timeout: {
            seconds: number;
            nanos: number;
        } | null;
        side_effects: boolean;
        idempotent: boolean;
    };
    /** @param {ToolCall} call */
    encodeToolCall(call: ToolCall): {
        id: string;
        name: string;
        arguments: string;
    };
    /** @returns {ToolCallRecord} */
    decodeRecord(wire: any): ToolCallRecord;
    /** @returns {ToolCallRunResult | null} */
    decodeResult(wire: any): ToolCallRunResult | null;
    /** @returns {ToolSpec} */
    decodeToolSpec(wire: any): ToolSpec;
    /** @returns {ToolCall} */
    decodeToolCall(wire: any): ToolCall;
    decodeMessage(wire: any): any;
    decodeSpec(wire: any): any;
    /** @returns {RunEvent} */
    decodeEvent(wire: any): RunEvent;
}
/**
 * How JSON text is read and written. The default is the global `JSON`, which turns integers
 * beyond 2^53 into approximate numbers; plug in a lossless parser if your tools need them.
 */
export type Json = {
    parse: (text: string) => any;
    stringify: (value: any) => string | undefined;
};
export type Usage = {
    input_tokens: number;
    output_tokens: number;
    reported_total_tokens: number;
};
/**
 * a reasoning model's summary and its provider's opaque
 *   items (JSON text), as `llm_responded` carries them (see types.proto)
 */
export type Reasoning = {
    provider: string;
    summary: string;
    items: string;
    items_omitted: boolean;
    items_bytes: number;
};
export type ToolCallRecord = {
    tool_name: string;
    inputs: Record<string, any>;
    /**
     * `{}` when the call failed
     */
    output: Record<string, any>;
    duration_ms: number;
    success: boolean;
    /**
     * `null` when the call succeeded
     */
    error: string | null;
    iteration: number;
    call_id: string;
    started_at: Date | null;
    /**
     * an `ErrorKind` name, `"ERROR_KIND_UNSPECIFIED"` on success
     */
    error_kind: string;
};
export type ToolCallRunResult = {
    run_id: string;
    content: string;
    tool_call_history: ToolCallRecord[];
    iterations: number;
    terminated_by_limit: boolean;
    usage: Usage | null;
    /**
     * a `StopReason` name, such as `"STOP_REASON_FINAL_ANSWER"`
     */
    stop_reason: string;
};
export type ToolCall = {
    id: string;
    name: string;
    arguments: Record<string, any>;
};
export type ToolSpec = {
    name: string;
    description: string;
    /**
     * a JSON Schema object
     */
    input_schema: Record<string, any>;
    /**
     * milliseconds, `null` for the server's default
     */
    timeout: number | null;
    /**
     * whether it may change something (what approvals ask about)
     */
    side_effects?: boolean | undefined;
    /**
     * where the sidecar's tool comes from: `mcp:NAME` for an MCP
     * server's, empty for its own (in `listTools`)
     */
    origin?: string | undefined;
};
export type RunEvent = {
    run_id: string;
    /**
     * 1, 2, 3… per run, no gaps; 0 for an `llm_delta` (live, not logged)
     */
    sequence: number;
    time: Date | null;
    /**
     *   which payload field is set; that field holds the event's data
     */
    payload: "run_started" | "iteration_started" | "llm_delta" | "llm_responded" | "tool_call_started" | "tool_call_progress" | "tool_call_completed" | "approval_requested" | "approval_decided" | "run_completed" | "run_failed" | "run_cancelled" | "run_resumed";
    run_started?: {
        spec: Record<string, any>;
    } | undefined;
    iteration_started?: {
        iteration: number;
    } | undefined;
    /**
     * only on a stream that asked for deltas (`streamDeltas`)
     */
    llm_delta?: LlmDelta | undefined;
    /**
     * supersedes its iteration's deltas
     */
    llm_responded?: {
        iteration: number;
        content: string;
        tool_calls: ToolCall[];
        usage: Usage | null;
        reasoning: Reasoning | null;
    } | undefined;
    tool_call_started?: {
        call_id: string;
        tool_name: string;
        inputs: Record<string, any>;
        iteration: number;
    } | undefined;
    tool_call_progress?: ToolCallProgress | undefined;
    tool_call_completed?: {
        record: ToolCallRecord;
    } | undefined;
    approval_requested?: (ApprovalRequest & {
        how_to_answer: string;
    }) | undefined;
    /**
     * `decided_by`: session, rpc,
     * timeout or policy; `identity`: who decided (empty for timeout and policy)
     */
    approval_decided?: {
        call_id: string;
        approved: boolean;
        reason: string;
        decided_by: string;
        iteration: number;
        identity: string;
    } | undefined;
    run_completed?: {
        result: ToolCallRunResult;
    } | undefined;
    run_failed?: {
        code: number;
        message: string;
        result: ToolCallRunResult;
    } | undefined;
    run_cancelled?: {
        reason: string;
        result: ToolCallRunResult;
    } | undefined;
    /**
     * the run goes on after its sidecar restarted
     */
    run_resumed?: {
        after_sequence: number;
        iteration: number;
        reason: string;
        rerun_call_ids: string[];
        interrupted_call_ids: string[];
    } | undefined;
};
/**
 * how far a call in flight has got (an MCP server's
 *   progress notifications, coalesced by the sidecar)
 */
export type ToolCallProgress = {
    call_id: string;
    tool_name: string;
    /**
     * in the tool's own units
     */
    progress: number;
    /**
     * where it will be done; `null` when the tool does not know
     */
    total: number | null;
    /**
     * may be empty
     */
    message: string;
    iteration: number;
};
/**
 * a piece of an LLM answer while it streams (see events.proto)
 */
export type LlmDelta = {
    iteration: number;
    /**
     * appended to the answer's content (tool_call_index null)
     */
    text: string;
    /**
     * the tool call it extends, or null for text
     */
    tool_call_index: number | null;
    /**
     * on each tool call's first delta
     */
    tool_call_id: string;
    /**
     * on each tool call's first delta
     */
    tool_name: string;
    /**
     * a fragment of the call's arguments JSON text
     */
    arguments: string;
    usage: Usage | null;
    /**
     * the logged event it follows (its iteration_started)
     */
    after_sequence: number;
    /**
     * the position among the call's deltas of the first it holds
     */
    index: number;
    /**
     * how many it holds (more than 1 when the sidecar coalesced them)
     */
    count: number;
};
/**
 * a tool call that waits for approval
 */
export type ApprovalRequest = {
    call_id: string;
    tool_name: string;
    /**
     * what it would run with
     */
    inputs: Record<string, any>;
    iteration: number;
    /**
     * why approval is needed (which profile, which rule)
     */
    reason: string;
};
/**
 * a `RunSpec`, with its JSON fields as plain values
 */
export type RunSpecInput = {
    prompt: string;
    /**
     * a `ToolActorContext`
     */
    context?: Record<string, any> | undefined;
    /**
     * 0 = the server's default (25)
     */
    max_iterations?: number | undefined;
    /**
     * `script`: the scripted LLM's turns, as an array (or its JSON text)
     */
    llm?: {
        profile?: string;
        model?: string;
        script?: any[] | string;
    } | undefined;
    tool_names?: string[] | undefined;
    run_id?: string | undefined;
    detach?: boolean | undefined;
};
