// Between the wire objects of @grpc/proto-loader and the objects of this client's API.
//
// The wire carries JSON values as JSON text (`inputs`, `output`, `arguments`, `input_schema`,
// `script`, `resource_bindings`, `project_resources`): the API hands out parsed values and
// takes plain values, encoding them on the way out. Timestamps become `Date`s, Durations
// milliseconds, an absent `optional` field `null`. Field names stay as in the .proto files.
import { fromDuration, fromTimestamp, toDuration, toTimestamp } from './time.js';

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

export const TERMINAL = Object.freeze(['run_completed', 'run_failed', 'run_cancelled']);
const SPEC_KEYS = new Set(['prompt', 'context', 'max_iterations', 'llm', 'tool_names', 'run_id', 'detach']);
const CONTEXT_KEYS = new Set([
  'plan_id',
  'phase',
  'sandbox_root',
  'automation_profile',
  'resource_bindings',
  'project_resources',
  'tool_call_history',
]);
const LLM_KEYS = new Set(['profile', 'model', 'script']);

export class Codec {
  /** @param {Json} json */
  constructor(json) {
    this.json = json;
  }

  // -- JSON text ---------------------------------------------------------------------------

  /** Parse a JSON text field; `empty` is what empty text means. */
  parse(text, field, empty = {}) {
    if (!text) return empty;
    try {
      return this.json.parse(text);
    } catch (err) {
      throw new SyntaxError(`${field} is not valid JSON: ${err.message}`);
    }
  }

  /** JSON text for a value; `undefined` and `null` become empty text (the field's default). */
  stringify(value, field) {
    if (value === undefined || value === null) return '';
    const text = this.json.stringify(value);
    if (typeof text !== 'string') throw new TypeError(`${field} cannot be represented as JSON`);
    return text;
  }

  // -- requests ----------------------------------------------------------------------------

  /**
   * A wire `RunSpec` from a prompt or a `RunSpecInput`. Unknown keys are rejected, so a
   * camelCase `maxIterations` is an error rather than silently ignored.
   *
   * @param {string | RunSpecInput} input
   * @param {Set<string>} [extra] keys the caller handles itself
   */
  encodeSpec(input, extra = new Set()) {
    if (typeof input === 'string') input = { prompt: input };
    if (input === null || typeof input !== 'object') {
      throw new TypeError('a run spec is a prompt string or an object with a prompt');
    }
    checkKeys(input, SPEC_KEYS, 'run spec', extra);
    const spec = {
      prompt: input.prompt ?? '',
      max_iterations: input.max_iterations ?? 0,
      tool_names: input.tool_names ?? [],
      run_id: input.run_id ?? '',
      detach: Boolean(input.detach),
    };
    if (input.context) spec.context = this.encodeContext(input.context);
    if (input.llm && typeof input.llm === 'object') {
      checkKeys(input.llm, LLM_KEYS, 'llm');
      spec.llm = {
        profile: input.llm.profile ?? '',
        model: input.llm.model ?? '',
        script:
          typeof input.llm.script === 'string' // already JSON text
            ? input.llm.script
            : this.stringify(input.llm.script, 'llm.script'),
      };
    }
    return spec;
  }

  encodeContext(context) {
    checkKeys(context, CONTEXT_KEYS, 'context');
    return {
      plan_id: context.plan_id ?? '',
      phase: context.phase ?? '',
      sandbox_root: context.sandbox_root ?? '',
      automation_profile: context.automation_profile ?? '',
      resource_bindings: this.stringify(context.resource_bindings, 'context.resource_bindings'),
      project_resources: this.stringify(context.project_resources, 'context.project_resources'),
      tool_call_history: (context.tool_call_history ?? []).map((r) => this.encodeRecord(r)),
    };
  }

  /** @param {ToolCallRecord} record */
  encodeRecord(record) {
    const wire = {
      ...record,
      inputs: this.stringify(record.inputs ?? {}, 'record.inputs'),
      output: this.stringify(record.output ?? {}, 'record.output'),
      started_at: toTimestamp(record.started_at),
    };
    if (record.error === null || record.error === undefined) delete wire.error;
    return wire;
  }

  /** A wire `ToolSpec` from a tool definition (see `normaliseTools` in tools.js). */
  encodeToolSpec(tool) {
    return {
      name: tool.name,
      description: tool.description ?? '',
      input_schema: this.stringify(tool.input_schema, `tools[${tool.name}].input_schema`),
      timeout: tool.timeout ? toDuration(tool.timeout) : null,
      side_effects: Boolean(tool.side_effects),
      idempotent: Boolean(tool.idempotent),
    };
  }

  /** @param {ToolCall} call */
  encodeToolCall(call) {
    return {
      id: call.id ?? '',
      name: call.name,
      arguments: this.stringify(call.arguments ?? {}, `tool_calls[${call.name}].arguments`),
    };
  }

  // -- responses ---------------------------------------------------------------------------

  /** @returns {ToolCallRecord} */
  decodeRecord(wire) {
    const { _error, ...record } = wire; // `_error`: the synthetic oneof of `optional error`
    return {
      ...record,
      inputs: this.parse(wire.inputs, 'record.inputs'),
      output: this.parse(wire.output, 'record.output'),
      error: wire.error ?? null,
      started_at: fromTimestamp(wire.started_at),
    };
  }

  /** @returns {ToolCallRunResult | null} */
  decodeResult(wire) {
    if (!wire) return null;
    return { ...wire, tool_call_history: wire.tool_call_history.map((r) => this.decodeRecord(r)) };
  }

  /** @returns {ToolSpec} */
  decodeToolSpec(wire) {
    return {
      ...wire,
      input_schema: this.parse(wire.input_schema, `${wire.name}.input_schema`, { type: 'object' }),
      timeout: fromDuration(wire.timeout),
    };
  }

  /** @returns {ToolCall} */
  decodeToolCall(wire) {
    return { ...wire, arguments: this.parse(wire.arguments, `${wire.name}.arguments`) };
  }

  decodeMessage(wire) {
    return { ...wire, tool_calls: wire.tool_calls.map((c) => this.decodeToolCall(c)) };
  }

  decodeSpec(wire) {
    if (!wire) return null;
    const spec = { ...wire };
    if (wire.context) {
      spec.context = {
        ...wire.context,
        resource_bindings: this.parse(wire.context.resource_bindings, 'context.resource_bindings'),
        project_resources: this.parse(wire.context.project_resources, 'context.project_resources'),
        tool_call_history: wire.context.tool_call_history.map((r) => this.decodeRecord(r)),
      };
    }
    if (wire.llm) spec.llm = { ...wire.llm, script: this.parse(wire.llm.script, 'llm.script', null) };
    return spec;
  }

  /** @returns {RunEvent} */
  decodeEvent(wire) {
    const { payload } = wire;
    const event = {
      run_id: wire.run_id,
      sequence: wire.sequence,
      time: fromTimestamp(wire.time),
      payload,
    };
    const data = wire[payload];
    switch (payload) {
      case 'run_started':
        event.run_started = { spec: this.decodeSpec(data.spec) };
        break;
      case 'llm_responded':
        event.llm_responded = { ...data, tool_calls: data.tool_calls.map((c) => this.decodeToolCall(c)) };
        break;
      case 'tool_call_started':
        event.tool_call_started = { ...data, inputs: this.parse(data.inputs, 'tool_call_started.inputs') };
        break;
      case 'tool_call_completed':
        event.tool_call_completed = { record: this.decodeRecord(data.record) };
        break;
      case 'run_completed':
      case 'run_failed':
      case 'run_cancelled':
        event[payload] = { ...data, result: this.decodeResult(data.result) };
        break;
      case 'iteration_started':
        event.iteration_started = { ...data };
        break;
      case 'tool_call_progress':
        event.tool_call_progress = {
          call_id: data.call_id,
          tool_name: data.tool_name,
          progress: data.progress,
          total: data._total === 'total' ? data.total : null,
          message: data.message,
          iteration: data.iteration,
        };
        break;
      case 'llm_delta': {
        const { _tool_call_index: _presence, ...delta } = data;
        const index = data._tool_call_index === 'tool_call_index' ? data.tool_call_index : null;
        event.llm_delta = { ...delta, tool_call_index: index, count: data.count || 1 };
        break;
      }
      case 'approval_requested':
        event.approval_requested = { ...data, inputs: this.parse(data.inputs, 'approval_requested.inputs') };
        break;
      default:
        // A payload this client does not know (a newer server): passed through as it came.
        if (payload) event[payload] = data;
    }
    return event;
  }
}

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
export function wireEvents(response) {
  const batch = response.events ?? [];
  if (!response.event) return batch;
  return batch.length ? [...batch, response.event] : [response.event];
}

function checkKeys(object, allowed, what, extra = new Set()) {
  for (const key of Object.keys(object)) {
    if (!allowed.has(key) && !extra.has(key)) {
      const known = [...allowed, ...extra].join(', ');
      throw new TypeError(`unknown ${what} field '${key}' (fields are named as in the protos: ${known})`);
    }
  }
}
