// A client-hosted LLM that streams: an async generator (or any async iterable) whose pieces
// go to the sidecar as `llm_delta` messages before its answer.

/**
 * @typedef {string | {text?: string, tool_call_index?: number | null, tool_call_id?: string,
 *   tool_name?: string, arguments?: string,
 *   usage?: {input_tokens: number, output_tokens: number}}} LlmDeltaInput  one piece a
 *   streaming LLM function yields: a string (text), or an object shaped like an `llm_delta`
 *   event's: `text`, or a tool call's `tool_call_index` (0-based) with `tool_call_id` and
 *   `tool_name` on its first piece and a fragment of its `arguments` JSON text; `usage` so far
 */

/** @internal Whether what an LLM function returned streams (an async iterable), rather than answers. */
export function streams(value) {
  return value !== null && typeof value === 'object' && typeof value[Symbol.asyncIterator] === 'function';
}

/** The wire fields of one yielded piece, or a TypeError saying what is wrong with it. */
function toDelta(piece, index) {
  if (typeof piece === 'string') return { text: piece };
  if (piece === null || typeof piece !== 'object' || Array.isArray(piece)) {
    const kind = piece === null ? 'null' : Array.isArray(piece) ? 'an array' : typeof piece;
    throw new TypeError(`the LLM stream's piece ${index} is ${kind}, not a string or an llm_delta object`);
  }
  const delta = {};
  const tool = piece.tool_call_index;
  if (tool !== undefined && tool !== null) {
    if (!Number.isInteger(tool) || tool < 0) {
      throw new TypeError(`the LLM stream's piece ${index} has tool_call_index ${tool}, not an integer >= 0`);
    }
    delta.tool_call_index = tool;
    delta.tool_call_id = String(piece.tool_call_id ?? '');
    delta.tool_name = String(piece.tool_name ?? '');
    delta.arguments = String(piece.arguments ?? '');
  } else {
    delta.text = String(piece.text ?? '');
  }
  if (piece.usage) delta.usage = piece.usage;
  return delta;
}

/**
 * @internal
 * Send each piece `stream` yields as an `llm_delta` of `requestId` (through `send`, in order,
 * each written before the next is taken), and return the answer: what the generator returned
 * (a response or a string) or, when it returns nothing, the answer its pieces spell (the text
 * joined, each tool call's id, name and joined arguments JSON text, the last usage).
 * `ended()` says the session is over: the stream is then closed and no more is sent.
 */
export async function streamAnswer(stream, requestId, send, ended) {
  const iterator = stream[Symbol.asyncIterator]();
  const text = [];
  const calls = new Map();
  let usage = null;
  for (let index = 0; ; index += 1) {
    const { value, done } = await iterator.next();
    if (done) {
      if (value !== undefined && value !== null) return value;
      const tool_calls = [...calls.keys()].sort((a, b) => a - b).map((key) => {
        const call = calls.get(key);
        return { id: call.id, name: call.name, arguments: call.arguments.join('') || '{}' };
      });
      return { content: text.join(''), tool_calls, usage };
    }
    if (ended()) {
      await iterator.return?.();
      throw new Error('the session ended while its LLM was streaming');
    }
    const delta = toDelta(value, index);
    if (delta.tool_call_index === undefined) {
      text.push(delta.text);
    } else {
      let call = calls.get(delta.tool_call_index);
      if (!call) {
        call = { id: delta.tool_call_id, name: delta.tool_name, arguments: [] };
        calls.set(delta.tool_call_index, call);
      }
      call.arguments.push(delta.arguments);
    }
    if (delta.usage) usage = delta.usage;
    await send({ llm_delta: { request_id: requestId, index, ...delta } });
  }
}
