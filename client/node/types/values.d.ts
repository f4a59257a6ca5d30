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
    /**
     * with an `output_schema`: the validated answer, parsed (type it
     * yourself); `null` when the run ended without a valid one (see `stop_reason`)
     */
    output: any;
    /**
     * the answer's JSON text as the sidecar validated it ('' without)
     */
    output_json: string;
    /**
     * with `STOP_REASON_MAX_OUTPUT_RETRIES`: why the last answer
     * was refused
     */
    output_error: string;
};
/**
 * a run's output schema (see types.proto)
 */
export type OutputSchema = {
    /**
     * ^[a-zA-Z0-9_-]{1,64}$
     */
    name: string;
    /**
     * a JSON Schema whose root is `{"type": "object"}`
     */
    schema: Record<string, any>;
    description: string;
};
/**
 * what `output_schema` takes in a run spec
 */
export type OutputSchemaInput = {
    /**
     * default `"output"`
     */
    name?: string | undefined;
    /**
     * a JSON Schema object (or its JSON text)
     */
    schema: Record<string, any> | string;
    description?: string | undefined;
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
     * supersedes its iteration's
     * deltas; `refusal` is non-empty when the model declined
     */
    llm_responded?: {
        iteration: number;
        content: string;
        tool_calls: ToolCall[];
        usage: Usage | null;
        reasoning: Reasoning | null;
        refusal: string;
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
    /**
     * the server's tools the run may use; empty: all of them
     */
    tool_names?: string[] | undefined;
    /**
     * offer none of the server's tools (only a session's
     * own); not together with `tool_names`
     */
    no_server_tools?: boolean | undefined;
    run_id?: string | undefined;
    detach?: boolean | undefined;
    /**
     * ask for the final answer as JSON matching a
     * schema: `result.output` is then the validated answer, parsed
     */
    output_schema?: OutputSchemaInput | undefined;
    /**
     * how many invalid answers the model may correct
     * (default 2); past them the run ends with `STOP_REASON_MAX_OUTPUT_RETRIES`
     */
    max_output_retries?: number | undefined;
};
