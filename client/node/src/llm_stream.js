// A client-hosted LLM that streams: an async generator (or any async iterable) whose pieces
// go to the sidecar as `llm_delta` messages before its answer.
import { untilAborted } from './abort.js';
import { inputKeys } from './names.js';

const PIECE_KEYS = new Set(['text', 'toolCallIndex', 'toolCallId', 'toolName', 'arguments', 'usage']);
const USAGE_KEYS = new Set(['inputTokens', 'outputTokens', 'reportedTotalTokens']);

/**
 * @typedef {string | {text?: string, toolCallIndex?: number | null, toolCallId?: string,
 *   toolName?: string, arguments?: string,
 *   usage?: {inputTokens: number, outputTokens: number}}} LlmDeltaInput  one piece a
 *   streaming LLM function yields: a string (text), or an object shaped like an `llmDelta`
 *   event's: `text`, or a tool call's `toolCallIndex` (0-based) with `toolCallId` and
 *   `toolName` on its first piece and a fragment of its `arguments` JSON text; `usage` so far
 */

/**
 * @internal
 * A wire `Usage` from `{inputTokens, outputTokens}` (`null` for none).
 *
 * @param {{inputTokens?: number, outputTokens?: number, reportedTotalTokens?: number} | null | undefined} usage
 */
export function wireUsage(usage) {
  if (!usage) return null;
  const { inputTokens, outputTokens, reportedTotalTokens } = inputKeys(usage, USAGE_KEYS, 'usage');
  return {
    input_tokens: inputTokens ?? 0,
    output_tokens: outputTokens ?? 0,
    reported_total_tokens: reportedTotalTokens ?? 0,
  };
}

/** @internal Whether what an LLM function returned streams (an async iterable), rather than answers. */
export function streams(value) {
  return value !== null && typeof value === 'object' && typeof value[Symbol.asyncIterator] === 'function';
}

/** `piece[key]` when it is a string, '' when absent; a TypeError naming the piece otherwise. */
function stringField(piece, key, index) {
  const value = piece[key];
  if (value === undefined || value === null) return '';
  if (typeof value === 'string') return value;
  const kind = Array.isArray(value) ? 'an array' : `${/^[aeiou]/.test(typeof value) ? 'an' : 'a'} ${typeof value}`;
  const hint = key === 'arguments' ? ' (a fragment of the JSON text: JSON.stringify the object)' : '';
  const verb = key === 'arguments' ? 'are' : 'is';
  throw new TypeError(`the LLM stream's piece ${index} has ${key} that ${verb} ${kind}, not a string${hint}`);
}

/**
 * The wire fields of one yielded piece (`delta`) and the usage it gave (`usage`, as given), or
 * a TypeError saying what is wrong with it: nothing a piece says may be lost (text beside a
 * tool call's fragment) or mangled (an object's `arguments` turned into "[object Object]").
 */
function toDelta(piece, index) {
  if (typeof piece === 'string') return { delta: { text: piece }, usage: null };
  if (piece === null || typeof piece !== 'object' || Array.isArray(piece)) {
    const kind = piece === null ? 'null' : Array.isArray(piece) ? 'an array' : typeof piece;
    throw new TypeError(`the LLM stream's piece ${index} is ${kind}, not a string or an llmDelta object`);
  }
  piece = inputKeys(piece, PIECE_KEYS, `the LLM stream's piece ${index}`);
  const delta = {};
  const tool = piece.toolCallIndex;
  const said = stringField(piece, 'text', index);
  if (tool !== undefined && tool !== null) {
    if (!Number.isInteger(tool) || tool < 0) {
      throw new TypeError(`the LLM stream's piece ${index} has toolCallIndex ${tool}, not an integer >= 0`);
    }
    if (said) {
      throw new TypeError(
        `the LLM stream's piece ${index} has both text and a toolCallIndex: yield the text ` +
          `and the tool call's fragment as pieces of their own`,
      );
    }
    delta.tool_call_index = tool;
    delta.tool_call_id = stringField(piece, 'toolCallId', index);
    delta.tool_name = stringField(piece, 'toolName', index);
    delta.arguments = stringField(piece, 'arguments', index);
  } else {
    delta.text = said;
  }
  if (piece.usage) delta.usage = wireUsage(piece.usage);
  return { delta, usage: piece.usage ?? null };
}

/** @internal The most pieces one message carries when an LLM streams faster than they are written. */
export const MAX_DELTAS_A_MESSAGE = 256;

/**
 * @internal
 * Send each piece `stream` yields as a delta of `requestId` (through `send`, in order), and
 * return the answer: what the generator returned (a response or a string) or, when it returns
 * nothing, the answer its pieces spell (the text joined, each tool call's id, name and joined
 * arguments JSON text, the last usage). With `batches` (the invocation's
 * `accepts_delta_batches`), the pieces taken while the last message was being written go
 * together in the next, an `llm_deltas` of up to `MAX_DELTAS_A_MESSAGE` (one alone goes as an
 * `llm_delta`); without it each goes in an `llm_delta` of its own. No more than that many
 * are taken ahead of what is written, and the answer waits for them all.
 *
 * The stream is closed (`return()`, so a generator's `finally` runs) whenever it is left
 * before its end: a bad piece, a failed send, or `signal` aborting (the invocation's deadline,
 * the session's end), which also stops the wait for a piece at once. A generator stalled in an
 * `await` is closed when that await settles: given the request's signal, its fetch ends then.
 *
 * @param {AsyncIterable<any>} stream
 * @param {string} requestId
 * @param {(message: object) => Promise<void>} send
 * @param {AbortSignal} signal
 * @param {boolean} [batches]
 */
export async function streamAnswer(stream, requestId, send, signal, batches = false) {
  const iterator = stream[Symbol.asyncIterator]();
  const text = [];
  const calls = new Map();
  let usage = null;
  let open = true; // false once the iterator has ended by itself (done, or thrown)
  const writer = new DeltaWriter(send, batches ? MAX_DELTAS_A_MESSAGE : 1);
  try {
    for (let index = 0; ; index += 1) {
      signal.throwIfAborted(); // no more is taken once nobody waits for the answer
      writer.check();
      const next = Promise.resolve(iterator.next());
      next.then(
        (step) => {
          if (step?.done) open = false;
        },
        () => {
          open = false;
        },
      );
      const { value, done } = await untilAborted(next, signal);
      if (done) {
        await untilAborted(writer.drained(), signal);
        if (value !== undefined && value !== null) return value;
        const toolCalls = [...calls.keys()].sort((a, b) => a - b).map((key) => {
          const call = calls.get(key);
          return { id: call.id, name: call.name, arguments: call.arguments.join('') || '{}' };
        });
        return { content: text.join(''), toolCalls, usage };
      }
      const { delta, usage: said } = toDelta(value, index);
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
      if (said) usage = said;
      await untilAborted(writer.add({ request_id: requestId, index, ...delta }), signal);
    }
  } finally {
    if (open) await close(iterator, signal);
  }
}

/**
 * The writes of one answer's deltas: one message in flight at a time, the deltas taken
 * meanwhile sent together in the next (up to `most`).
 */
class DeltaWriter {
  /** @type {object[]} deltas taken, not yet sent */
  #pending = [];
  /** @type {Promise<void> | null} the writes under way, until nothing is pending */
  #writing = null;
  /** @type {unknown} why a write failed */
  #failed = undefined;
  #send;
  #most;

  /**
   * @param {(message: object) => Promise<void>} send
   * @param {number} most
   */
  constructor(send, most) {
    this.#send = send;
    this.#most = most;
  }

  /** A failed write ends the answer: its error, thrown when the next piece would be taken. */
  check() {
    if (this.#failed !== undefined) throw this.#failed;
  }

  /**
   * Queue `delta`; resolves at once, unless `most` are queued behind a write already (then
   * once that write is done: no more is taken ahead than a message carries).
   *
   * @param {object} delta
   * @returns {Promise<void>}
   */
  add(delta) {
    this.#pending.push(delta);
    if (!this.#writing) {
      this.#writing = this.#write();
      return Promise.resolve();
    }
    return this.#pending.length >= this.#most ? this.drained() : Promise.resolve();
  }

  /** Resolves once every delta queued is written; rejects with a write's error. */
  async drained() {
    while (this.#writing) await this.#writing;
    this.check();
  }

  async #write() {
    try {
      while (this.#pending.length > 0 && this.#failed === undefined) {
        const batch = this.#pending.splice(0, this.#most);
        await this.#send(batch.length === 1 ? { llm_delta: batch[0] } : { llm_deltas: { deltas: batch } });
      }
    } catch (error) {
      this.#failed = error;
    } finally {
      this.#writing = null;
    }
  }
}

/**
 * Close `iterator` early; its own error there is dropped (the reason it is left is the one
 * that counts). Waited for only until `signal` aborts: a generator still inside an `await`
 * takes the close once that settles, and the session does not wait on it meanwhile.
 */
async function close(iterator, signal) {
  const closing = Promise.resolve().then(() => iterator.return?.());
  await untilAborted(closing, signal).catch(() => {});
}
