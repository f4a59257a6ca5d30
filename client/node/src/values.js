// The plain values of this client's API: what it hands out (results, records, events) and
// takes (run specs), as JSDoc types. Field names are the .proto files' in camelCase (the
// protobuf JSON mapping's names); enum values are the protos' names, typed as unions of
// them. `Codec` (codec.js) converts between these and the wire objects.

/**
 * @typedef {'STOP_REASON_UNSPECIFIED' | 'STOP_REASON_FINAL_ANSWER' | 'STOP_REASON_MAX_ITERATIONS'
 *   | 'STOP_REASON_CANCELLED' | 'STOP_REASON_DEADLINE' | 'STOP_REASON_ERROR'
 *   | 'STOP_REASON_TOOL_CALL_BUDGET' | 'STOP_REASON_TOKEN_BUDGET' | 'STOP_REASON_WALL_CLOCK_BUDGET'
 *   | 'STOP_REASON_MAX_OUTPUT_RETRIES' | 'STOP_REASON_REFUSAL'} StopReason  why a run ended
 */
/**
 * @typedef {'ERROR_KIND_UNSPECIFIED' | 'ERROR_KIND_UNKNOWN_TOOL' | 'ERROR_KIND_INVALID_ARGUMENTS'
 *   | 'ERROR_KIND_TIMEOUT' | 'ERROR_KIND_EXCEPTION' | 'ERROR_KIND_CANCELLED'
 *   | 'ERROR_KIND_DENIED'} ErrorKind  why a tool call failed (`ERROR_KIND_UNSPECIFIED` when it
 *   did not)
 */
/**
 * @typedef {'RUN_STATE_UNSPECIFIED' | 'RUN_STATE_RUNNING' | 'RUN_STATE_COMPLETED'
 *   | 'RUN_STATE_FAILED' | 'RUN_STATE_CANCELLED'} RunState  where a run is
 */
/**
 * @typedef {'ROLE_UNSPECIFIED' | 'ROLE_SYSTEM' | 'ROLE_USER' | 'ROLE_ASSISTANT'
 *   | 'ROLE_TOOL'} Role  who wrote a message of the conversation
 */
/**
 * @typedef {'runStarted' | 'iterationStarted' | 'llmDelta' | 'llmResponded' | 'toolCallStarted'
 *   | 'toolCallProgress' | 'toolCallCompleted' | 'approvalRequested' | 'approvalDecided'
 *   | 'runCompleted' | 'runFailed' | 'runCancelled' | 'runResumed'} Payload  which of a
 *   `RunEvent`'s payload fields is set
 */

/** @typedef {{inputTokens: number, outputTokens: number, reportedTotalTokens: number}} Usage */
/**
 * @typedef {{provider: string, summary: string, items: string, itemsOmitted: boolean,
 *   itemsBytes: number}} Reasoning  a reasoning model's summary and its provider's opaque
 *   items (JSON text), as `llmResponded` carries them (see types.proto)
 */

/**
 * @typedef {object} ToolCallRecord
 * @property {string} toolName
 * @property {Record<string, any>} inputs
 * @property {Record<string, any>} output  `{}` when the call failed
 * @property {number} durationMs
 * @property {boolean} success
 * @property {string | null} error  `null` when the call succeeded
 * @property {number} iteration
 * @property {string} callId
 * @property {Date | null} startedAt
 * @property {ErrorKind} errorKind  `"ERROR_KIND_UNSPECIFIED"` on success
 * @property {boolean} [outputTruncated]  the output was cut to the sidecar's limit
 * @property {number} [outputBytes]  the output's size before it was cut
 */

/**
 * @typedef {object} ToolCallRunResult
 * @property {string} runId
 * @property {string} content
 * @property {ToolCallRecord[]} toolCallHistory
 * @property {number} iterations
 * @property {boolean} terminatedByLimit
 * @property {Usage | null} usage
 * @property {StopReason} stopReason
 * @property {boolean} historyOmitted  the sidecar left the records out (too many for one
 *   message); the client put them back in `toolCallHistory`
 * @property {number} toolCallCount  how many records the run has
 * @property {boolean} contentTruncated
 * @property {any} output  with an `outputSchema`: the validated answer, parsed (type it
 *   yourself); `null` when the run ended without a valid one (see `stopReason`)
 * @property {string} outputJson  the answer's JSON text as the sidecar validated it ('' without)
 * @property {string} outputError  with `STOP_REASON_MAX_OUTPUT_RETRIES`: why the last answer
 *   was refused
 */

/**
 * @typedef {object} OutputSchema  a run's output schema (see types.proto)
 * @property {string} name  ^[a-zA-Z0-9_-]{1,64}$
 * @property {Record<string, any>} schema  a JSON Schema whose root is `{"type": "object"}`
 * @property {string} description
 */

/**
 * @typedef {object} OutputSchemaInput  what `outputSchema` takes in a run spec
 * @property {string} [name]  default `"output"`
 * @property {Record<string, any> | string} schema  a JSON Schema object (or its JSON text)
 * @property {string} [description]
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
 * @property {Record<string, any>} inputSchema  a JSON Schema object
 * @property {number | null} timeout  milliseconds, `null` for the server's default
 * @property {boolean} [sideEffects]  whether it may change something (what approvals ask about)
 * @property {boolean} [idempotent]  safe to run twice with the same inputs
 * @property {string} [origin]  where the sidecar's tool comes from: `mcp:NAME` for an MCP
 *   server's, empty for its own (in `listTools`)
 */

/**
 * @typedef {object} RunEvent
 * @property {string} runId
 * @property {number} sequence  1, 2, 3… per run, no gaps; 0 for an `llmDelta` (live, not logged)
 * @property {Date | null} time
 * @property {Payload} payload  which payload field is set; that field holds the event's data
 * @property {{spec: Record<string, any>}} [runStarted]
 * @property {{iteration: number}} [iterationStarted]
 * @property {LlmDelta} [llmDelta]  only on a stream that asked for deltas (`streamDeltas`)
 * @property {{iteration: number, content: string, toolCalls: ToolCall[], usage: Usage | null,
 *   reasoning: Reasoning | null, refusal: string}} [llmResponded]  supersedes its iteration's
 *   deltas; `refusal` is non-empty when the model declined
 * @property {{callId: string, toolName: string, inputs: Record<string, any>, iteration: number}} [toolCallStarted]
 * @property {ToolCallProgress} [toolCallProgress]
 * @property {{record: ToolCallRecord}} [toolCallCompleted]
 * @property {ApprovalRequest & {howToAnswer: string}} [approvalRequested]
 * @property {{callId: string, approved: boolean, reason: string, decidedBy: string,
 *   iteration: number, identity: string}} [approvalDecided]  `decidedBy`: session, rpc,
 *   timeout or policy; `identity`: who decided (empty for timeout and policy)
 * @property {{result: ToolCallRunResult}} [runCompleted]
 * @property {{code: number, message: string, result: ToolCallRunResult}} [runFailed]
 * @property {{reason: string, result: ToolCallRunResult}} [runCancelled]
 * @property {{afterSequence: number, iteration: number, reason: string,
 *   rerunCallIds: string[], interruptedCallIds: string[]}} [runResumed]
 *   the run goes on after its sidecar restarted
 */

/**
 * @typedef {object} ToolCallProgress  how far a call in flight has got (an MCP server's
 *   progress notifications, coalesced by the sidecar)
 * @property {string} callId
 * @property {string} toolName
 * @property {number} progress  in the tool's own units
 * @property {number | null} total  where it will be done; `null` when the tool does not know
 * @property {string} message  may be empty
 * @property {number} iteration
 */

/**
 * @typedef {object} LlmDelta  a piece of an LLM answer while it streams (see events.proto)
 * @property {number} iteration
 * @property {string} text  appended to the answer's content (toolCallIndex null)
 * @property {number | null} toolCallIndex  the tool call it extends, or null for text
 * @property {string} toolCallId  on each tool call's first delta
 * @property {string} toolName  on each tool call's first delta
 * @property {string} arguments  a fragment of the call's arguments JSON text
 * @property {Usage | null} usage
 * @property {number} afterSequence  the logged event it follows (its iterationStarted)
 * @property {number} index  the position among the call's deltas of the first it holds
 * @property {number} count  how many it holds (more than 1 when the sidecar coalesced them)
 */

/**
 * @typedef {object} ApprovalRequest  a tool call that waits for approval
 * @property {string} callId
 * @property {string} toolName
 * @property {Record<string, any>} inputs  what it would run with
 * @property {number} iteration
 * @property {string} reason  why approval is needed (which profile, which rule)
 */

/**
 * @typedef {object} RunContextInput  a `ToolActorContext`, with its JSON fields as plain values
 * @property {string} [planId]
 * @property {string} [phase]
 * @property {string} [sandboxRoot]  the directory the sidecar's file tools work in
 * @property {string} [automationProfile]  which approvals the run's tool calls need
 * @property {Record<string, any>} [resourceBindings]
 * @property {Record<string, any>} [projectResources]
 * @property {ToolCallRecord[]} [toolCallHistory]  records of earlier calls, for the model
 */

/**
 * @typedef {object} RunSpecInput  a `RunSpec`, with its JSON fields as plain values
 * @property {string} prompt
 * @property {RunContextInput} [context]
 * @property {number} [maxIterations]  0 = the server's default (25)
 * @property {{profile?: string, model?: string, script?: any[] | string}} [llm]
 *   `script`: the scripted LLM's turns, as an array (or its JSON text), in the sidecar's
 *   script format (`{content, tool_calls: [{id, name, arguments}], usage}`)
 * @property {string[]} [toolNames]  the server's tools the run may use; empty: all of them
 * @property {boolean} [noServerTools]  offer none of the server's tools (only a session's
 *   own); not together with `toolNames`
 * @property {string} [runId]
 * @property {boolean} [detach]
 * @property {OutputSchemaInput} [outputSchema]  ask for the final answer as JSON matching a
 *   schema: `result.output` is then the validated answer, parsed
 * @property {number} [maxOutputRetries]  how many invalid answers the model may correct
 *   (default 2); past them the run ends with `STOP_REASON_MAX_OUTPUT_RETRIES`
 */

export {};
