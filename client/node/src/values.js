// The plain values of this client's API: what it hands out (results, records, events) and
// takes (run specs), as JSDoc types. Field names are those of the .proto files; `Codec`
// (codec.js) converts between these and the wire objects.

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
 * @property {any} output  with an `output_schema`: the validated answer, parsed (type it
 *   yourself); `null` when the run ended without a valid one (see `stop_reason`)
 * @property {string} output_json  the answer's JSON text as the sidecar validated it ('' without)
 * @property {string} output_error  with `STOP_REASON_MAX_OUTPUT_RETRIES`: why the last answer
 *   was refused
 */

/**
 * @typedef {object} OutputSchema  a run's output schema (see types.proto)
 * @property {string} name  ^[a-zA-Z0-9_-]{1,64}$
 * @property {Record<string, any>} schema  a JSON Schema whose root is `{"type": "object"}`
 * @property {string} description
 */

/**
 * @typedef {object} OutputSchemaInput  what `output_schema` takes in a run spec
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
 *   reasoning: Reasoning | null, refusal: string}} [llm_responded]  supersedes its iteration's
 *   deltas; `refusal` is non-empty when the model declined
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
 * @property {string[]} [tool_names]  the server's tools the run may use; empty: all of them
 * @property {boolean} [no_server_tools]  offer none of the server's tools (only a session's
 *   own); not together with `tool_names`
 * @property {string} [run_id]
 * @property {boolean} [detach]
 * @property {OutputSchemaInput} [output_schema]  ask for the final answer as JSON matching a
 *   schema: `result.output` is then the validated answer, parsed
 * @property {number} [max_output_retries]  how many invalid answers the model may correct
 *   (default 2); past them the run ends with `STOP_REASON_MAX_OUTPUT_RETRIES`
 */

export {};
