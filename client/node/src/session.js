// A Session run: the sidecar calls this process's tools (and, optionally, its LLM) over one
// bidirectional stream.
import { once } from 'node:events';

import { abortAt, untilAborted } from './abort.js';
import { TERMINAL, wireEvents } from './codec.js';
import { RunFailedError, SidecarError, ToolError, describeError, toSidecarError } from './errors.js';
import { RecordsSeen } from './history.js';
import { streamAnswer, streams } from './llm_stream.js';
import { fromTimestamp } from './time.js';
import { normaliseOutput } from './tools.js';

/**
 * @typedef {object} LlmRequest  what a client-hosted LLM function receives
 * @property {string} request_id
 * @property {number} iteration
 * @property {Array<{role: string, content: string, tool_calls: import('./codec.js').ToolCall[],
 *   tool_call_id: string, is_error: boolean}>} messages  the whole conversation, oldest first
 * @property {import('./codec.js').ToolSpec[]} tools
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
 * @property {Array<{id: string, name: string, arguments?: Record<string, any> | string}>} [tool_calls]
 *   `arguments`: an object, or its JSON text (passed on as it is)
 * @property {{input_tokens: number, output_tokens: number}} [usage]
 */

/** @typedef {import('./llm_stream.js').LlmDeltaInput} LlmDeltaInput */

/**
 * @typedef {boolean | {approved: boolean, reason?: string}} ApprovalAnswer  an approver's
 *   decision: `true`/`false`, or an object with a reason (the model sees a denial's reason)
 */

/**
 * @typedef {(request: import('./codec.js').ApprovalRequest & {run_id: string, signal: AbortSignal})
 *   => ApprovalAnswer | Promise<ApprovalAnswer>} Approver  decides this session's approval
 *   requests; `signal` aborts when the session ends. Anything but `true` or an object with
 *   `approved: true` denies, and so does an approver that throws (saying why).
 */

/**
 * One session run. Iterate it for the run's events (`for await (const event of run)`), or
 * just `await run.result`; both work, and the tools are answered either way.
 *
 * The stream is read as fast as it arrives, so that tool invocations are answered at once
 * even while the code iterating the events is busy: events wait in memory for the iterator
 * (at most one run's worth, the same log the sidecar itself keeps).
 *
 * The session asks for batched events: one message may carry several events and then an
 * invocation. The events are queued first, in order, and the invocation starts right after,
 * without waiting for the iterator to take them, as when each came in a message of its own.
 */
export class SessionRun {
  /** @type {string | null} the run's id, known from its `run_started` event on */
  runId = null;

  #call;
  #openCall;
  #start;
  /** with `reattach`: when to stop trying to re-attach (ms since the epoch), else null */
  #reattachUntil = null;
  #attempt = 0;
  #lastSequence = 0;
  /** answers sent, by call or request id: a re-attached stream may ask again */
  #answers = new Map();
  /** ids whose work is under way: an invocation sent again does not start it twice */
  #working = new Set();
  /** set when the iteration was left early: the stream is dropped once the run has ended */
  #leaving = false;
  #codec;
  #tools;
  #llm;
  #approver;
  /** the conversation so far: each LLM invocation brings only the messages added since */
  #conversation = [];
  #queue = [];
  #wake = null;
  #iterating = false;
  #finished = false;
  #halfClosed = false;
  #error = null;
  #terminal = null;
  /** The records this session's events carried: a result too large for a message omits them. */
  #records = new RecordsSeen();
  #inflight = new Set();
  #writes = Promise.resolve();
  #settle;
  #result;

  /** @internal */
  constructor({ openCall, codec, tools, llm, approver = null, start, reattach = false, reattachTimeoutMs = 60_000 }) {
    this.#openCall = openCall;
    this.#start = start;
    if (reattach) this.#reattachUntil = Date.now() + reattachTimeoutMs;
    this.#approver = approver;
    this.#codec = codec;
    this.#tools = tools;
    this.#llm = llm;
    this.#result = new Promise((resolve, reject) => {
      this.#settle = { resolve, reject };
    });
    this.#result.catch(() => {}); // a rejection nobody awaits must not crash the process
    this.#attach(start);
  }

  /** Open a stream whose first message is `{start}`; only the current stream is heard. */
  #attach(start) {
    const call = this.#openCall();
    this.#call = call;
    this.#halfClosed = false;
    call.on('data', (message) => {
      if (call === this.#call) this.#onMessage(message);
    });
    call.on('error', () => {}); // reported through 'status'
    call.on('status', (status) => {
      if (call === this.#call) this.#onStatus(status);
    });
    this.#send({ start });
  }

  /** A stream ended: re-attach after a broken one (with `reattach`), else finish. */
  #onStatus(status) {
    const lost = status.code === 14 || status.code === 1; // UNAVAILABLE, CANCELLED
    const held = status.code === 9 && /not waiting/.test(status.details ?? ''); // FAILED_PRECONDITION
    const backoff = [50, 100, 200, 500, 1000][Math.min(this.#attempt, 4)];
    const retry =
      this.#reattachUntil !== null && !this.#terminal && !this.#leaving && this.runId && (lost || held) &&
      Date.now() + backoff <= this.#reattachUntil;
    if (!retry) {
      this.#finish(status);
      return;
    }
    this.#attempt += 1;
    const start = { ...this.#start, reattach_run_id: this.runId, after_sequence: this.#lastSequence };
    setTimeout(() => this.#attach(start), backoff); // a backoff between attempts
  }

  /**
   * The run's result: resolves on `run_completed` and `run_cancelled` (see `stop_reason`),
   * rejects with a `RunFailedError` on `run_failed`, and with a `SidecarError` when the
   * stream ends with a non-OK status (its `result` is the partial result if one was sent).
   *
   * @returns {Promise<import('./codec.js').ToolCallRunResult>}
   */
  get result() {
    return this.#result;
  }

  /** Ask the sidecar to cancel the run; it ends with `run_cancelled` carrying `reason`. */
  cancel(reason = '') {
    return this.#send({ cancel: { reason } });
  }

  /**
   * Give the run up: the sidecar is asked to cancel it, and the stream is dropped once the
   * run has ended (at most a few seconds later); `result` rejects with CANCELLED. (A stream
   * merely dropped would leave the run waiting for a re-attach, see `session_reattach_s`.)
   */
  abort() {
    if (this.#finished) return;
    if (this.#terminal) {
      this.#call.cancel();
      return;
    }
    this.#leaving = true;
    void this.#send({ cancel: { reason: 'the client went away' } });
    setTimeout(() => this.#call.cancel(), 5000).unref(); // should its end never come
  }

  /** @returns {AsyncIterator<import('./codec.js').RunEvent>} */
  [Symbol.asyncIterator]() {
    if (this.#iterating) throw new Error('a SessionRun can be iterated only once');
    this.#iterating = true;
    return {
      next: async () => {
        for (;;) {
          if (this.#queue.length) return { value: this.#queue.shift(), done: false };
          if (this.#finished) {
            if (this.#error) throw this.#error;
            return { value: undefined, done: true };
          }
          await new Promise((resolve) => {
            this.#wake = resolve;
          });
        }
      },
      return: async () => {
        // Leaving the loop before the run's end gives the run up, as with the other streams.
        if (!this.#finished && !this.#terminal) this.abort();
        return { value: undefined, done: true };
      },
    };
  }

  #notify() {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }

  #onMessage(message) {
    let queued = false;
    try {
      // The events first (a batch, or the one event), then the invocation they precede.
      for (const wire of wireEvents(message)) {
        const event = this.#codec.decodeEvent(wire);
        if (event.payload === 'run_started') this.runId = event.run_id;
        this.#lastSequence = Number(event.sequence);
        this.#attempt = 0;
        this.#records.add(event);
        if (TERMINAL.includes(event.payload)) {
          const result = event[event.payload].result;
          if (result?.history_omitted) result.tool_call_history = this.#records.inOrder();
          this.#terminal = event;
          if (this.#leaving) this.#call.cancel();
          else this.#halfClose(); // nothing more to say: the run is over
        }
        this.#queue.push(event);
        queued = true;
        if (event.payload === 'approval_requested' && this.#approver) {
          void this.#decide(event.run_id, event.approval_requested);
        }
      }
      if (message.kind === 'tool_invocation') {
        void this.#invokeTool(message.tool_invocation);
      } else if (message.kind === 'llm_invocation') {
        void this.#invokeLlm(message.llm_invocation);
      }
    } catch (err) {
      // Only a message this client cannot decode gets here: end the session, report it.
      this.#error = err;
      this.#call.cancel();
    } finally {
      if (queued) this.#notify();
    }
  }

  /**
   * Do the work for id `key` and send its answer (none when the work gives null); an answer
   * given already is sent again, and work under way is not started twice (a re-attached
   * stream is sent what is still owed).
   */
  async #answer(key, work) {
    if (this.#working.has(key)) return;
    let answer = this.#answers.get(key);
    if (!answer) {
      this.#working.add(key);
      try {
        answer = await work();
      } finally {
        this.#working.delete(key);
      }
      if (answer === null) return; // abandoned: the sidecar no longer waits for it
      this.#answers.set(key, answer);
      if (this.#answers.size > 1024) this.#answers.delete(this.#answers.keys().next().value);
    }
    await this.#send(answer);
  }

  #invokeTool(invocation) {
    return this.#answer(`tool:${invocation.call_id}`, () => this.#runTool(invocation));
  }

  async #runTool(invocation) {
    const { call_id, tool_name, iteration } = invocation;
    const deadline = fromTimestamp(invocation.deadline);
    const controller = new AbortController();
    this.#inflight.add(controller);
    const reason = new ToolError(`the sidecar's deadline for call ${call_id} has passed`);
    const timer = abortAt(controller, deadline, reason);
    let answer;
    try {
      const tool = this.#tools.get(tool_name);
      if (!tool) throw new ToolError(`this client hosts no tool named ${tool_name}`);
      const inputs = this.#codec.parse(invocation.inputs, 'inputs');
      const idempotency_key = invocation.idempotency_key ?? '';
      const context = {
        call_id,
        tool_name,
        iteration,
        deadline,
        idempotency_key,
        signal: controller.signal,
      };
      const value = await tool.handler(inputs, context);
      answer = { call_id, output: this.#codec.stringify(normaliseOutput(value), 'output') };
    } catch (err) {
      answer = { call_id, error: describeError(err) };
    } finally {
      clearTimeout(timer);
      this.#inflight.delete(controller);
    }
    return { tool_result: answer };
  }

  async #decide(runId, asked) {
    const { call_id, tool_name, inputs, iteration, reason } = asked;
    const controller = new AbortController();
    this.#inflight.add(controller);
    let decision;
    try {
      const answer = await this.#approver({
        run_id: runId, call_id, tool_name, inputs, iteration, reason, signal: controller.signal,
      });
      decision =
        answer !== null && typeof answer === 'object'
          ? { call_id, approved: answer.approved === true, reason: String(answer.reason ?? '') }
          : { call_id, approved: answer === true, reason: '' };
    } catch (err) {
      decision = { call_id, approved: false, reason: `the approver failed: ${describeError(err)}` };
    } finally {
      this.#inflight.delete(controller);
    }
    await this.#send({ approval_decision: decision });
  }

  #invokeLlm(invocation) {
    return this.#answer(`llm:${invocation.request_id}`, () => this.#askLlm(invocation));
  }

  /**
   * Ask the LLM function and return its answer to send, or null when it was abandoned: it was
   * still answering at the invocation's deadline or the session's end (its signal aborted).
   */
  async #askLlm(invocation) {
    const codec = this.#codec;
    const deadline = fromTimestamp(invocation.deadline);
    const controller = new AbortController();
    const { signal } = controller;
    const request = {
      request_id: invocation.request_id,
      iteration: invocation.iteration,
      messages: [],
      tools: invocation.tools.map((t) => codec.decodeToolSpec(t)),
      deadline,
      signal,
    };
    const why = new Error(`the sidecar's deadline for LLM request ${request.request_id} has passed`);
    this.#inflight.add(controller);
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
        const send = (message) => this.#send(message);
        response = await streamAnswer(response, request.request_id, send, signal);
      }
      if (typeof response === 'string') response = { content: response };
      if (!response || typeof response !== 'object') {
        throw new TypeError(`the LLM function returned ${response === null ? 'null' : typeof response}`);
      }
      answer = {
        request_id: request.request_id,
        content: response.content ?? '',
        tool_calls: (response.tool_calls ?? []).map((c) =>
          typeof c.arguments === 'string' ? { id: c.id ?? '', name: c.name, arguments: c.arguments } : codec.encodeToolCall(c),
        ),
        usage: response.usage ?? null,
      };
    } catch (err) {
      answer = { request_id: request.request_id, error: describeError(err) };
    } finally {
      clearTimeout(timer);
      this.#inflight.delete(controller);
    }
    return signal.aborted ? null : { llm_result: answer };
  }

  /** Write messages one after another, waiting for 'drain' when the stream's buffer is full. */
  #send(message) {
    this.#writes = this.#writes
      .then(async () => {
        if (this.#halfClosed || this.#finished) return;
        if (!this.#call.write(message)) {
          await Promise.race([once(this.#call, 'drain'), once(this.#call, 'status')]);
        }
      })
      .catch(() => {}); // a failed write ends the call, which 'status' reports
    return this.#writes;
  }

  #halfClose() {
    this.#writes = this.#writes.then(() => {
      if (this.#halfClosed || this.#finished) return;
      this.#halfClosed = true;
      this.#call.end();
    });
  }

  #finish(status) {
    this.#finished = true;
    for (const controller of this.#inflight) {
      controller.abort(new ToolError('the session has ended'));
    }
    const terminal = this.#terminal;
    const partial = terminal ? terminal[terminal.payload].result : null;
    if (!this.#error && status.code !== 0) {
      const err = new SidecarError(status.code, status.details, status.metadata);
      err.result = partial;
      this.#error = err;
    }
    if (this.#error) {
      this.#settle.reject(toSidecarError(this.#error));
    } else if (!terminal) {
      this.#error = new Error('the session ended without a terminal event');
      this.#settle.reject(this.#error);
    } else if (terminal.payload === 'run_failed') {
      const { code, message, result } = terminal.run_failed;
      this.#settle.reject(new RunFailedError(code, message, result));
    } else {
      this.#settle.resolve(partial);
    }
    this.#notify();
  }
}
