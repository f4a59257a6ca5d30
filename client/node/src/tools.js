// The tools this process hosts in a session: their definitions, and one invocation run.
import { abortAt } from './abort.js';
import { ToolError, describeError } from './errors.js';
import { inputKeys, withLegacyNames } from './names.js';
import { fromTimestamp } from './time.js';

const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const DEFINITION_KEYS = new Set(['name', 'description', 'inputSchema', 'timeout', 'sideEffects', 'idempotent', 'handler']);

/**
 * A tool handler's return value as the JSON object the record will hold: objects as they
 * are, anything else `x` as `{"result": x}` (`undefined` counts as `null`), the rule the
 * sidecar's own runner applies to server-side tools.
 *
 * The sidecar does not apply it to a client's `tool_result.output`: valid JSON that is not
 * an object (`42`) becomes a failed record there. The Python client normalises before
 * sending too, so both clients give the same records.
 */
export function normaliseOutput(value) {
  if (value === undefined) value = null;
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) return value;
  return { result: value };
}

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
export function normaliseTools(tools) {
  const out = new Map();
  if (!tools) return out;
  /** @type {Array<[string | undefined, ToolLike]>} */
  const entries = Array.isArray(tools) ? tools.map((t) => [undefined, t]) : Object.entries(tools);
  for (const [key, tool] of entries) {
    const def = typeof tool === 'function' ? { handler: tool } : { ...inputKeys(tool, DEFINITION_KEYS, 'tool definition') };
    def.name = def.name ?? key ?? (typeof tool === 'function' ? tool.name : undefined);
    if (typeof def.handler !== 'function') {
      throw new TypeError(`tool ${def.name ?? '(unnamed)'}: give a function or {handler: function}`);
    }
    if (!def.name || !TOOL_NAME.test(def.name)) {
      throw new TypeError(`tool name ${JSON.stringify(def.name ?? '')} must match ${TOOL_NAME}`);
    }
    if (out.has(def.name)) throw new TypeError(`tool ${def.name} is declared twice`);
    out.set(def.name, def);
  }
  return out;
}

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
export async function runTool(invocation, { tools, codec, inflight }) {
  const { call_id, tool_name, iteration } = invocation;
  const deadline = fromTimestamp(invocation.deadline);
  const controller = new AbortController();
  inflight.add(controller);
  const reason = new ToolError(`the sidecar's deadline for call ${call_id} has passed`);
  const timer = abortAt(controller, deadline, reason);
  let answer;
  try {
    const tool = tools.get(tool_name);
    if (!tool) throw new ToolError(`this client hosts no tool named ${tool_name}`);
    const inputs = codec.parse(invocation.inputs, 'inputs');
    const context = withLegacyNames({
      callId: call_id,
      toolName: tool_name,
      iteration,
      deadline,
      idempotencyKey: invocation.idempotency_key ?? '',
      signal: controller.signal,
    });
    const value = await tool.handler(inputs, context);
    answer = { call_id, output: codec.stringify(normaliseOutput(value), 'output') };
  } catch (err) {
    answer = { call_id, error: describeError(err) };
  } finally {
    clearTimeout(timer);
    inflight.delete(controller);
  }
  return { tool_result: answer };
}
