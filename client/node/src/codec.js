// Between the wire objects of @grpc/proto-loader and the objects of this client's API (values.js).
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

export const TERMINAL = Object.freeze(['run_completed', 'run_failed', 'run_cancelled']);
const SPEC_KEYS = new Set([
  'prompt',
  'context',
  'max_iterations',
  'llm',
  'tool_names',
  'no_server_tools',
  'output_schema',
  'max_output_retries',
  'run_id',
  'detach',
]);
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
const OUTPUT_KEYS = new Set(['name', 'schema', 'description']);

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
   * @param {string | import('./values.js').RunSpecInput} input
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
      no_server_tools: Boolean(input.no_server_tools),
      run_id: input.run_id ?? '',
      detach: Boolean(input.detach),
    };
    if (input.context) spec.context = this.encodeContext(input.context);
    if (input.output_schema) spec.output_schema = this.encodeOutputSchema(input.output_schema);
    if (input.max_output_retries !== undefined && input.max_output_retries !== null) {
      spec.max_output_retries = input.max_output_retries;
    }
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

  /**
   * A wire `OutputSchema` from `{name, schema, description}`: `schema` a JSON Schema object
   * (or its JSON text), `name` defaulting to `"output"`.
   *
   * @param {import('./values.js').OutputSchemaInput} output
   */
  encodeOutputSchema(output) {
    if (typeof output !== 'object') throw new TypeError('output_schema is an object {name, schema, description}');
    checkKeys(output, OUTPUT_KEYS, 'output_schema');
    return {
      name: output.name ?? 'output',
      schema: typeof output.schema === 'string' ? output.schema : this.stringify(output.schema, 'output_schema.schema'),
      description: output.description ?? '',
    };
  }

  /** An `OutputSchema` as plain values (`null` for none). */
  decodeOutputSchema(wire) {
    if (!wire) return null;
    return { ...wire, schema: this.parse(wire.schema, 'output_schema.schema') };
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

  /** @param {import('./values.js').ToolCallRecord} record */
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

  /** @param {import('./values.js').ToolCall} call */
  encodeToolCall(call) {
    return {
      id: call.id ?? '',
      name: call.name,
      arguments: this.stringify(call.arguments ?? {}, `tool_calls[${call.name}].arguments`),
    };
  }

  // -- responses ---------------------------------------------------------------------------

  /** @returns {import('./values.js').ToolCallRecord} */
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

  /**
   * A result: `output` the structured answer parsed (`null` without one), `output_json` its
   * JSON text as the sidecar validated it.
   *
   * @returns {import('./values.js').ToolCallRunResult | null}
   */
  decodeResult(wire) {
    if (!wire) return null;
    return {
      ...wire,
      tool_call_history: wire.tool_call_history.map((r) => this.decodeRecord(r)),
      output: wire.output ? this.parse(wire.output, 'result.output') : null,
      output_json: wire.output ?? '',
      output_error: wire.output_error ?? '',
    };
  }

  /** @returns {import('./values.js').ToolSpec} */
  decodeToolSpec(wire) {
    return {
      ...wire,
      input_schema: this.parse(wire.input_schema, `${wire.name}.input_schema`, { type: 'object' }),
      timeout: fromDuration(wire.timeout),
    };
  }

  /** @returns {import('./values.js').ToolCall} */
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
    spec.output_schema = this.decodeOutputSchema(wire.output_schema);
    const { _max_output_retries: presence, ...rest } = spec;
    rest.max_output_retries = presence === 'max_output_retries' ? wire.max_output_retries : null;
    return rest;
  }

  /** @returns {import('./values.js').RunEvent} */
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
