// A client-hosted LLM: the function this process answers a session's LLM invocations with,
// and the conversation it is given, held across invocations.
import { abortAt, untilAborted } from './abort.js';
import { describeError } from './errors.js';
import { streamAnswer, streams, wireUsage } from './llm_stream.js';
import { inputKeys, withLegacyNames } from './names.js';
import { fromTimestamp } from './time.js';

const RESPONSE_KEYS = new Set(['content', 'toolCalls', 'usage', 'refusal']);

/**
 * @typedef {object} LlmMessage  one message of the conversation a client-hosted LLM is given
 * @property {import('./values.js').Role} role
 * @property {string} content
 * @property {import('./values.js').ToolCall[]} toolCalls  what an assistant message asked for
 * @property {string} toolCallId  the call a tool message answers
 * @property {boolean} isError  a tool message whose call failed
 */

/**
 * @typedef {object} LlmRequest  what a client-hosted LLM function receives
 * @property {string} requestId
 * @property {number} iteration
 * @property {LlmMessage[]} messages  the whole conversation, oldest first
 * @property {import('./values.js').ToolSpec[]} tools
 * @property {import('./values.js').OutputSchema | null} outputSchema  the run's output schema:
 *   a final answer (no tool calls) must be its `content` as JSON text matching it (the sidecar
 *   validates it, and sends an invalid one back with the error as a user message)
 * @property {Date | null} deadline  when the sidecar stops waiting for the answer
 *   (`client_llm_timeout_s` after it asked)
 * @property {AbortSignal} signal  aborts at `deadline` or when the session ends: pass it on
 *   (to `fetch`, say) so that the work stops then. An answer still pending then is abandoned:
 *   not sent, and a streaming generator is closed (its `finally` runs).
 */

/**
 * @typedef {object} LlmResponse  what a client-hosted LLM function returns (or a string: the
 *   content). An async generator function streams instead: it yields `LlmDeltaInput` pieces,
 *   which reach the run's `streamDeltas` streams as they come, and returns the whole answer, or
 *   nothing for the answer its pieces spell.
 * @property {string} [content]
 * @property {Array<{id: string, name: string, arguments?: Record<string, any> | string}>} [toolCalls]
 *   `arguments`: an object, or its JSON text (passed on as it is)
 * @property {{inputTokens: number, outputTokens: number}} [usage]
 * @property {string} [refusal]  the model declined: the run ends with `STOP_REASON_REFUSAL`
 */

/** @typedef {import('./llm_stream.js').LlmDeltaInput} LlmDeltaInput */

/**
 * @internal
 * The LLM function of one session and the conversation so far: the session asks for
 * incremental messages, so each invocation brings only the messages added since the last.
 */
export class HostedLlm {
  #llm;
  #codec;
  #conversation = [];

  /**
   * @param {(request: LlmRequest) => any} llm
   * @param {import('./codec.js').Codec} codec
   */
  constructor(llm, codec) {
    this.#llm = llm;
    this.#codec = codec;
  }

  /**
   * Ask the LLM function and return its answer to send, or null when it was abandoned: it was
   * still answering at the invocation's deadline or the session's end (its signal aborted,
   * with every controller in `inflight`). A streaming answer's pieces go out through `send`.
   *
   * @param {any} invocation  an `LlmInvocation`
   * @param {(message: object) => Promise<void>} send
   * @param {Set<AbortController>} inflight
   */
  async ask(invocation, send, inflight) {
    const codec = this.#codec;
    const deadline = fromTimestamp(invocation.deadline);
    const controller = new AbortController();
    const { signal } = controller;
    const requestId = invocation.request_id;
    const request = withLegacyNames({
      requestId,
      iteration: invocation.iteration,
      messages: [],
      tools: invocation.tools.map((t) => codec.decodeToolSpec(t)),
      outputSchema: codec.decodeOutputSchema(invocation.output_schema),
      deadline,
      signal,
    });
    const why = new Error(`the sidecar's deadline for LLM request ${requestId} has passed`);
    inflight.add(controller);
    const timer = abortAt(controller, deadline, why);
    let answer;
    try {
      // Before any await: invocations extend the conversation in the order they arrive.
      const offset = invocation.message_offset ?? 0;
      // At 0 it carries the whole conversation (a sidecar that restarted, or took the run
      // over, sends it again to a re-attached client): it replaces what was held.
      if (offset === 0) this.#conversation = [];
      if (offset !== this.#conversation.length) {
        throw new Error(
          `the sidecar's LLM invocation continues its conversation at message ${offset}, ` +
            `but this client holds ${this.#conversation.length}`,
        );
      }
      for (const m of invocation.messages) this.#conversation.push(codec.decodeMessage(m));
      request.messages = [...this.#conversation];
      let response = await untilAborted(Promise.resolve(this.#llm(request)), signal);
      if (streams(response)) {
        const batches = invocation.accepts_delta_batches === true;
        response = await streamAnswer(response, requestId, send, signal, batches);
      }
      if (typeof response === 'string') response = { content: response };
      if (!response || typeof response !== 'object') {
        throw new TypeError(`the LLM function returned ${response === null ? 'null' : typeof response}`);
      }
      response = inputKeys(response, RESPONSE_KEYS, 'LLM response');
      answer = {
        request_id: requestId,
        content: response.content ?? '',
        tool_calls: (response.toolCalls ?? []).map((c) =>
          typeof c.arguments === 'string' ? { id: c.id ?? '', name: c.name, arguments: c.arguments } : codec.encodeToolCall(c),
        ),
        usage: wireUsage(response.usage),
        refusal: response.refusal ?? '',
      };
    } catch (err) {
      answer = { request_id: requestId, error: describeError(err) };
    } finally {
      clearTimeout(timer);
      inflight.delete(controller);
    }
    return signal.aborted ? null : { llm_result: answer };
  }
}
