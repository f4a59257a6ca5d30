// Between the wire objects of @grpc/proto-loader and the objects of this client's API (values.js).
//
// The wire carries JSON values as JSON text (`inputs`, `output`, `arguments`, `input_schema`,
// `script`, `resource_bindings`, `project_resources`): the API hands out parsed values and
// takes plain values, encoding them on the way out. Timestamps become `Date`s, Durations
// milliseconds, an absent `optional` field `null`. The wire's field names are the protos'
// (snake_case); the API's are camelCase (names.js), as the protobuf JSON mapping has them,
// and so are the payload names (`event.payload === 'toolCallCompleted'`).
import { camelKeys, camelName, inputKeys, withLegacyNames } from './names.js';
import { fromDuration, fromTimestamp, toDuration, toTimestamp } from './time.js';

/**
 * @typedef {{parse: (text: string) => any, stringify: (value: any) => string | undefined}} Json
 *   How JSON text is read and written. The default is the global `JSON`, which turns integers
 *   beyond 2^53 into approximate numbers; plug in a lossless parser if your tools need them.
 */

/** The payloads that end a run. */
export const TERMINAL = Object.freeze(/** @type {const} */ (['runCompleted', 'runFailed', 'runCancelled']));
const SPEC_KEYS = new Set([
  'prompt',
  'context',
  'maxIterations',
  'llm',
  'toolNames',
  'noServerTools',
  'outputSchema',
  'maxOutputRetries',
  'runId',
  'detach',
]);
const CONTEXT_KEYS = new Set([
  'planId',
  'phase',
  'sandboxRoot',
  'automationProfile',
  'resourceBindings',
  'projectResources',
  'toolCallHistory',
]);
const LLM_KEYS = new Set(['profile', 'model', 'script']);
const OUTPUT_KEYS = new Set(['name', 'schema', 'description']);
const RECORD_KEYS = new Set([
  'toolName',
  'inputs',
  'output',
  'durationMs',
  'success',
  'error',
  'iteration',
  'callId',
  'startedAt',
  'errorKind',
  'outputTruncated',
  'outputBytes',
]);

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
   * misspelt `maxIteration` is an error rather than silently ignored; the snake_case names
   * of the first release (`max_iterations`) are still taken, with a deprecation warning.
   *
   * @param {string | import('./values.js').RunSpecInput} input
   * @param {Set<string>} [extra] keys the caller handles itself
   */
  encodeSpec(input, extra = new Set()) {
    if (typeof input === 'string') input = { prompt: input };
    if (input === null || typeof input !== 'object') {
      throw new TypeError('a run spec is a prompt string or an object with a prompt');
    }
    input = inputKeys(input, SPEC_KEYS, 'run spec', extra);
    const spec = {
      prompt: input.prompt ?? '',
      max_iterations: input.maxIterations ?? 0,
      tool_names: input.toolNames ?? [],
      no_server_tools: Boolean(input.noServerTools),
      run_id: input.runId ?? '',
      detach: Boolean(input.detach),
    };
    if (input.context) spec.context = this.encodeContext(input.context);
    if (input.outputSchema) spec.output_schema = this.encodeOutputSchema(input.outputSchema);
    if (input.maxOutputRetries !== undefined && input.maxOutputRetries !== null) {
      spec.max_output_retries = input.maxOutputRetries;
    }
    if (input.llm && typeof input.llm === 'object') {
      const llm = inputKeys(input.llm, LLM_KEYS, 'llm');
      spec.llm = {
        profile: llm.profile ?? '',
        model: llm.model ?? '',
        script:
          typeof llm.script === 'string' // already JSON text
            ? llm.script
            : this.stringify(llm.script, 'llm.script'),
      };
    }
    return spec;
  }

  /**
   * A wire `OutputSchema` from `{name, schema, description}`: `schema` a JSON Schema object
   * (or its JSON text), `name` defaulting to `"output"`.
   *
   * @param {import('./values.js').OutputSchemaInput} output
   */
  encodeOutputSchema(output) {
    if (typeof output !== 'object') throw new TypeError('outputSchema is an object {name, schema, description}');
    inputKeys(output, OUTPUT_KEYS, 'outputSchema');
    return {
      name: output.name ?? 'output',
      schema: typeof output.schema === 'string' ? output.schema : this.stringify(output.schema, 'outputSchema.schema'),
      description: output.description ?? '',
    };
  }

  /** An `OutputSchema` as plain values (`null` for none). */
  decodeOutputSchema(wire) {
    if (!wire) return null;
    return withLegacyNames({ ...camelKeys(wire), schema: this.parse(wire.schema, 'outputSchema.schema') });
  }

  encodeContext(input) {
    const context = inputKeys(input, CONTEXT_KEYS, 'context');
    return {
      plan_id: context.planId ?? '',
      phase: context.phase ?? '',
      sandbox_root: context.sandboxRoot ?? '',
      automation_profile: context.automationProfile ?? '',
      resource_bindings: this.stringify(context.resourceBindings, 'context.resourceBindings'),
      project_resources: this.stringify(context.projectResources, 'context.projectResources'),
      tool_call_history: (context.toolCallHistory ?? []).map((r) => this.encodeRecord(r)),
    };
  }

  /** @param {import('./values.js').ToolCallRecord} input */
  encodeRecord(input) {
    const record = inputKeys(input, RECORD_KEYS, 'record');
    const wire = {
      tool_name: record.toolName ?? '',
      inputs: this.stringify(record.inputs ?? {}, 'record.inputs'),
      output: this.stringify(record.output ?? {}, 'record.output'),
      duration_ms: record.durationMs ?? 0,
      success: Boolean(record.success),
      iteration: record.iteration ?? 0,
      call_id: record.callId ?? '',
      started_at: toTimestamp(record.startedAt),
      error_kind: record.errorKind ?? 'ERROR_KIND_UNSPECIFIED',
      output_truncated: Boolean(record.outputTruncated),
      output_bytes: record.outputBytes ?? 0,
    };
    if (record.error !== null && record.error !== undefined) wire.error = record.error;
    return wire;
  }

  /** A wire `ToolSpec` from a tool definition (see `normaliseTools` in tools.js). */
  encodeToolSpec(tool) {
    return {
      name: tool.name,
      description: tool.description ?? '',
      input_schema: this.stringify(tool.inputSchema, `tools[${tool.name}].inputSchema`),
      timeout: tool.timeout ? toDuration(tool.timeout) : null,
      side_effects: Boolean(tool.sideEffects),
      idempotent: Boolean(tool.idempotent),
    };
  }

  /** @param {import('./values.js').ToolCall} call */
  encodeToolCall(call) {
    return {
      id: call.id ?? '',
      name: call.name,
      arguments: this.stringify(call.arguments ?? {}, `toolCalls[${call.name}].arguments`),
    };
  }

  // -- responses ---------------------------------------------------------------------------

  /** @returns {import('./values.js').ToolCallRecord} */
  decodeRecord(wire) {
    const record = camelKeys(wire);
    record.inputs = this.parse(wire.inputs, 'record.inputs');
    record.output = this.parse(wire.output, 'record.output');
    record.error = wire.error ?? null;
    record.startedAt = fromTimestamp(wire.started_at);
    return record;
  }

  /**
   * A result: `output` the structured answer parsed (`null` without one), `outputJson` its
   * JSON text as the sidecar validated it.
   *
   * @returns {import('./values.js').ToolCallRunResult | null}
   */
  decodeResult(wire) {
    if (!wire) return null;
    const result = camelKeys(wire);
    result.toolCallHistory = wire.tool_call_history.map((r) => this.decodeRecord(r));
    result.output = wire.output ? this.parse(wire.output, 'result.output') : null;
    result.outputJson = wire.output ?? '';
    result.outputError = wire.output_error ?? '';
    return withLegacyNames(result);
  }

  /** @returns {import('./values.js').ToolSpec} */
  decodeToolSpec(wire) {
    const spec = camelKeys(wire);
    spec.inputSchema = this.parse(wire.input_schema, `${wire.name}.inputSchema`, { type: 'object' });
    spec.timeout = fromDuration(wire.timeout);
    return spec;
  }

  /** @returns {import('./values.js').ToolCall} */
  decodeToolCall(wire) {
    return { ...wire, arguments: this.parse(wire.arguments, `${wire.name}.arguments`) };
  }

  /** @returns {import('./hosted_llm.js').LlmMessage} */
  decodeMessage(wire) {
    const message = camelKeys(wire);
    message.toolCalls = wire.tool_calls.map((c) => this.decodeToolCall(c));
    return message;
  }

  decodeSpec(wire) {
    if (!wire) return null;
    const spec = camelKeys(wire);
    if (wire.context) {
      const { context } = spec;
      context.resourceBindings = this.parse(wire.context.resource_bindings, 'context.resourceBindings');
      context.projectResources = this.parse(wire.context.project_resources, 'context.projectResources');
      context.toolCallHistory = wire.context.tool_call_history.map((r) => this.decodeRecord(r));
    }
    if (wire.llm) spec.llm.script = this.parse(wire.llm.script, 'llm.script', null);
    spec.outputSchema = this.decodeOutputSchema(wire.output_schema);
    spec.maxOutputRetries = wire._max_output_retries === 'max_output_retries' ? wire.max_output_retries : null;
    return withLegacyNames(spec);
  }

  /** @returns {import('./values.js').RunEvent} */
  decodeEvent(wire) {
    const { payload: field } = wire;
    const payload = field ? camelName(field) : field;
    const event = {
      runId: wire.run_id,
      sequence: wire.sequence,
      time: fromTimestamp(wire.time),
      payload,
    };
    const data = wire[field];
    switch (field) {
      case 'run_started':
        event.runStarted = withLegacyNames({ spec: this.decodeSpec(data.spec) });
        break;
      case 'llm_responded': {
        const responded = camelKeys(data);
        responded.toolCalls = data.tool_calls.map((c) => this.decodeToolCall(c));
        event.llmResponded = responded;
        break;
      }
      case 'tool_call_started': {
        const started = camelKeys(data);
        started.inputs = this.parse(data.inputs, 'toolCallStarted.inputs');
        event.toolCallStarted = started;
        break;
      }
      case 'tool_call_completed':
        event.toolCallCompleted = { record: this.decodeRecord(data.record) };
        break;
      case 'run_completed':
      case 'run_failed':
      case 'run_cancelled': {
        const ended = camelKeys(data);
        ended.result = this.decodeResult(data.result);
        event[payload] = ended;
        break;
      }
      case 'tool_call_progress': {
        const progress = camelKeys(data);
        progress.total = data._total === 'total' ? data.total : null;
        event.toolCallProgress = progress;
        break;
      }
      case 'llm_delta': {
        const delta = camelKeys(data);
        delta.toolCallIndex = data._tool_call_index === 'tool_call_index' ? data.tool_call_index : null;
        delta.count = data.count || 1;
        event.llmDelta = withLegacyNames(delta);
        break;
      }
      case 'approval_requested': {
        const asked = camelKeys(data);
        asked.inputs = this.parse(data.inputs, 'approvalRequested.inputs');
        event.approvalRequested = asked;
        break;
      }
      default:
        // Any other payload (iteration_started, approval_decided, run_resumed, and one this
        // client does not know, from a newer server): its fields as they came, camelCase.
        if (field) event[payload] = camelKeys(data);
    }
    return withLegacyNames(event);
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
