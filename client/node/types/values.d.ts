/**
 * why a run ended
 */
export type StopReason = "STOP_REASON_UNSPECIFIED" | "STOP_REASON_FINAL_ANSWER" | "STOP_REASON_MAX_ITERATIONS" | "STOP_REASON_CANCELLED" | "STOP_REASON_DEADLINE" | "STOP_REASON_ERROR" | "STOP_REASON_TOOL_CALL_BUDGET" | "STOP_REASON_TOKEN_BUDGET" | "STOP_REASON_WALL_CLOCK_BUDGET" | "STOP_REASON_MAX_OUTPUT_RETRIES" | "STOP_REASON_REFUSAL";
/**
 * why a tool call failed (`ERROR_KIND_UNSPECIFIED` when it
 *   did not)
 */
export type ErrorKind = "ERROR_KIND_UNSPECIFIED" | "ERROR_KIND_UNKNOWN_TOOL" | "ERROR_KIND_INVALID_ARGUMENTS" | "ERROR_KIND_TIMEOUT" | "ERROR_KIND_EXCEPTION" | "ERROR_KIND_CANCELLED" | "ERROR_KIND_DENIED";
/**
 * where a run is
 */
export type RunState = "RUN_STATE_UNSPECIFIED" | "RUN_STATE_RUNNING" | "RUN_STATE_COMPLETED" | "RUN_STATE_FAILED" | "RUN_STATE_CANCELLED";
/**
 * who wrote a message of the conversation
 */
export type Role = "ROLE_UNSPECIFIED" | "ROLE_SYSTEM" | "ROLE_USER" | "ROLE_ASSISTANT" | "ROLE_TOOL";
/**
 * which of a
 *   `RunEvent`'s payload fields is set
 */
export type Payload = "runStarted" | "iterationStarted" | "llmDelta" | "llmResponded" | "toolCallStarted" | "toolCallProgress" | "toolCallCompleted" | "approvalRequested" | "approvalDecided" | "runCompleted" | "runFailed" | "runCancelled" | "runResumed";
export type Usage = {
    inputTokens: number;
    outputTokens: number;
    reportedTotalTokens: number;
};
/**
 * a reasoning model's summary and its provider's opaque
 *   items (JSON text), as `llmResponded` carries them (see types.proto)
 */
export type Reasoning = {
    provider: string;
    summary: string;
    items: string;
    itemsOmitted: boolean;
    itemsBytes: number;
};
export type ToolCallRecord = {
    toolName: string;
    inputs: Record<string, any>;
    /**
     * `{}` when the call failed
     */
    output: Record<string, any>;
    durationMs: number;
    success: boolean;
    /**
     * `null` when the call succeeded
     */
    error: string | null;
    iteration: number;
    callId: string;
    startedAt: Date | null;
    /**
     * `"ERROR_KIND_UNSPECIFIED"` on success
     */
    errorKind: ErrorKind;
    /**
     * the output was cut to the sidecar's limit
     */
    outputTruncated?: boolean | undefined;
    /**
     * the output's size before it was cut
     */
    outputBytes?: number | undefined;
};
export type ToolCallRunResult = {
    runId: string;
    content: string;
    toolCallHistory: ToolCallRecord[];
    iterations: number;
    terminatedByLimit: boolean;
    usage: Usage | null;
    stopReason: StopReason;
    /**
     * the sidecar left the records out (too many for one
     * message); the client put them back in `toolCallHistory`
     */
    historyOmitted: boolean;
    /**
     * how many records the run has
     */
    toolCallCount: number;
    contentTruncated: boolean;
    /**
     * with an `outputSchema`: the validated answer, parsed (type it
     * yourself); `null` when the run ended without a valid one (see `stopReason`)
     */
    output: any;
    /**
     * the answer's JSON text as the sidecar validated it ('' without)
     */
    outputJson: string;
    /**
     * with `STOP_REASON_MAX_OUTPUT_RETRIES`: why the last answer
     * was refused
     */
    outputError: string;
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
 * what `outputSchema` takes in a run spec
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
    inputSchema: Record<string, any>;
    /**
     * milliseconds, `null` for the server's default
     */
    timeout: number | null;
    /**
     * whether it may change something (what approvals ask about)
     */
    sideEffects?: boolean | undefined;
    /**
     * safe to run twice with the same inputs
     */
    idempotent?: boolean | undefined;
    /**
     * where the sidecar's tool comes from: `mcp:NAME` for an MCP
     * server's, empty for its own (in `listTools`)
     */
    origin?: string | undefined;
};
export type RunEvent = {
    runId: string;
    /**
     * 1, 2, 3… per run, no gaps; 0 for an `llmDelta` (live, not logged)
     */
    sequence: number;
    time: Date | null;
    /**
     * which payload field is set; that field holds the event's data
     */
    payload: Payload;
    runStarted?: {
        spec: Record<string, any>;
    } | undefined;
    iterationStarted?: {
        iteration: number;
    } | undefined;
    /**
     * only on a stream that asked for deltas (`streamDeltas`)
     */
    llmDelta?: LlmDelta | undefined;
    /**
     * supersedes its iteration's
     * deltas; `refusal` is non-empty when the model declined
     */
    llmResponded?: {
        iteration: number;
        content: string;
        toolCalls: ToolCall[];
        usage: Usage | null;
        reasoning: Reasoning | null;
        refusal: string;
    } | undefined;
    toolCallStarted?: {
        callId: string;
        toolName: string;
        inputs: Record<string, any>;
        iteration: number;
    } | undefined;
    toolCallProgress?: ToolCallProgress | undefined;
    toolCallCompleted?: {
        record: ToolCallRecord;
    } | undefined;
    approvalRequested?: (ApprovalRequest & {
        howToAnswer: string;
    }) | undefined;
    /**
     * `decidedBy`: session, rpc,
     * timeout or policy; `identity`: who decided (empty for timeout and policy)
     */
    approvalDecided?: {
        callId: string;
        approved: boolean;
        reason: string;
        decidedBy: string;
        iteration: number;
        identity: string;
    } | undefined;
    runCompleted?: {
        result: ToolCallRunResult;
    } | undefined;
    runFailed?: {
        code: number;
        message: string;
        result: ToolCallRunResult;
    } | undefined;
    runCancelled?: {
        reason: string;
        result: ToolCallRunResult;
    } | undefined;
    /**
     * the run goes on after its sidecar restarted
     */
    runResumed?: {
        afterSequence: number;
        iteration: number;
        reason: string;
        rerunCallIds: string[];
        interruptedCallIds: string[];
    } | undefined;
};
/**
 * how far a call in flight has got (an MCP server's
 *   progress notifications, coalesced by the sidecar)
 */
export type ToolCallProgress = {
    callId: string;
    toolName: string;
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
     * appended to the answer's content (toolCallIndex null)
     */
    text: string;
    /**
     * the tool call it extends, or null for text
     */
    toolCallIndex: number | null;
    /**
     * on each tool call's first delta
     */
    toolCallId: string;
    /**
     * on each tool call's first delta
     */
    toolName: string;
    /**
     * a fragment of the call's arguments JSON text
     */
    arguments: string;
    usage: Usage | null;
    /**
     * the logged event it follows (its iterationStarted)
     */
    afterSequence: number;
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
    callId: string;
    toolName: string;
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
 * a `ToolActorContext`, with its JSON fields as plain values
 */
export type RunContextInput = {
    planId?: string | undefined;
    phase?: string | undefined;
    /**
     * the directory the sidecar's file tools work in
     */
    sandboxRoot?: string | undefined;
    /**
     * which approvals the run's tool calls need
     */
    automationProfile?: string | undefined;
    resourceBindings?: Record<string, any> | undefined;
    projectResources?: Record<string, any> | undefined;
    /**
     * records of earlier calls, for the model
     */
    toolCallHistory?: ToolCallRecord[] | undefined;
};
/**
 * a `RunSpec`, with its JSON fields as plain values
 */
export type RunSpecInput = {
    prompt: string;
    context?: RunContextInput | undefined;
    /**
     * 0 = the server's default (25)
     */
    maxIterations?: number | undefined;
    /**
     * `script`: the scripted LLM's turns, as an array (or its JSON text), in the sidecar's
     * script format (`{content, tool_calls: [{id, name, arguments}], usage}`)
     */
    llm?: {
        profile?: string;
        model?: string;
        script?: any[] | string;
    } | undefined;
    /**
     * the server's tools the run may use; empty: all of them
     */
    toolNames?: string[] | undefined;
    /**
     * offer none of the server's tools (only a session's
     * own); not together with `toolNames`
     */
    noServerTools?: boolean | undefined;
    runId?: string | undefined;
    detach?: boolean | undefined;
    /**
     * ask for the final answer as JSON matching a
     * schema: `result.output` is then the validated answer, parsed
     */
    outputSchema?: OutputSchemaInput | undefined;
    /**
     * how many invalid answers the model may correct
     * (default 2); past them the run ends with `STOP_REASON_MAX_OUTPUT_RETRIES`
     */
    maxOutputRetries?: number | undefined;
};
