// A Session run: the sidecar calls this process's tools (and, optionally, its LLM) over one
// bidirectional stream.
import { Answers } from './answers.js';
import { decide } from './approvals.js';
import { TERMINAL, wireEvents } from './codec.js';
import { RunFailedError, SidecarError, Status, ToolError, toSidecarError } from './errors.js';
import { RecordsSeen } from './history.js';
import { HostedLlm } from './hosted_llm.js';
import { Outbox } from './outbox.js';
import { runTool } from './tools.js';

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
  /** @type {string | null} the run's id, known from its `runStarted` event on */
  runId = null;

  #call;
  #openCall;
  #start;
  /** with `reattach`: how long after a break to go on trying to re-attach (ms), else null */
  #reattachTimeoutMs = null;
  /** when the current break began (`performance.now()`): its first failure since a message */
  #brokenAt = null;
  #attempt = 0;
  #lastSequence = 0;
  /** what was answered: a re-attached stream may ask again */
  #answers = new Answers();
  /** set when the iteration was left early: the stream is dropped once the run has ended */
  #leaving = false;
  #codec;
  #tools;
  /** the client-hosted LLM, with the conversation so far */
  #llm;
  #approver;
  #queue = [];
  #wake = null;
  #iterating = false;
  #finished = false;
  #error = null;
  #terminal = null;
  /** The records this session's events carried: a result too large for a message omits them. */
  #records = new RecordsSeen();
  /** the controllers of the work under way (tools, LLM, approver), aborted at the end */
  #inflight = new Set();
  #outbox = new Outbox();
  /** how the work done for the sidecar sends its messages */
  #send = (message) => this.#outbox.send(message);
  #settle;
  #result;

  /** @internal */
  constructor({ openCall, codec, tools, llm, approver = null, start, reattach = false, reattachTimeoutMs = 60_000 }) {
    this.#openCall = openCall;
    this.#start = start;
    if (reattach) this.#reattachTimeoutMs = reattachTimeoutMs;
    this.#approver = approver;
    this.#codec = codec;
    this.#tools = tools;
    this.#llm = new HostedLlm(llm, codec);
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
    this.#outbox.attach(call);
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
    const lost = status.code === Status.UNAVAILABLE || status.code === Status.CANCELLED;
    const held = status.code === Status.FAILED_PRECONDITION && /not waiting/.test(status.details ?? '');
    const backoff = [50, 100, 200, 500, 1000][Math.min(this.#attempt, 4)];
    this.#brokenAt ??= performance.now(); // the window counts from the break, not the start
    const retry =
      this.#reattachTimeoutMs !== null && !this.#terminal && !this.#leaving && this.runId && (lost || held) &&
      performance.now() - this.#brokenAt + backoff <= this.#reattachTimeoutMs;
    if (!retry) {
      this.#finish(status);
      return;
    }
    this.#attempt += 1;
    const start = { ...this.#start, reattach_run_id: this.runId, after_sequence: this.#lastSequence };
    setTimeout(() => this.#reattach(start), backoff); // a backoff between attempts
  }

  /** Attach again, unless the client has been closed meanwhile: then the session ends. */
  #reattach(start) {
    try {
      this.#attach(start);
    } catch (err) {
      // grpc-js opens no call on a closed channel ("Channel has been shut down").
      this.#finish({ code: Status.CANCELLED, details: `the session could not re-attach: ${err.message}` });
    }
  }

  /**
   * The run's result: resolves on `runCompleted` and `runCancelled` (see `stopReason`),
   * rejects with a `RunFailedError` on `runFailed`, and with a `SidecarError` when the
   * stream ends with a non-OK status (its `result` is the partial result if one was sent).
   *
   * @returns {Promise<import('./values.js').ToolCallRunResult>}
   */
  get result() {
    return this.#result;
  }

  /** Ask the sidecar to cancel the run; it ends with `runCancelled` carrying `reason`. */
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

  /** @returns {AsyncIterator<import('./values.js').RunEvent>} */
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
    this.#brokenAt = null; // a stream delivers: a later break has a window of its own
    let queued = false;
    try {
      // The events first (a batch, or the one event), then the invocation they precede.
      for (const wire of wireEvents(message)) {
        const event = this.#codec.decodeEvent(wire);
        if (event.payload === 'runStarted') this.runId = event.runId;
        this.#lastSequence = Number(event.sequence);
        this.#attempt = 0;
        this.#records.add(event);
        if (TERMINAL.includes(event.payload)) {
          const result = event[event.payload].result;
          if (result?.historyOmitted) result.toolCallHistory = this.#records.inOrder();
          this.#terminal = event;
          if (this.#leaving) this.#call.cancel();
          else this.#outbox.halfClose(); // nothing more to say: the run is over
        }
        this.#queue.push(event);
        queued = true;
        if (event.payload === 'approvalRequested' && this.#approver) {
          void this.#decide(event.runId, event.approvalRequested);
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

  #invokeTool(invocation) {
    const host = { tools: this.#tools, codec: this.#codec, inflight: this.#inflight };
    return this.#answers.answer(`tool:${invocation.call_id}`, () => runTool(invocation, host), this.#send);
  }

  async #decide(runId, asked) {
    await this.#send(await decide(this.#approver, runId, asked, this.#inflight));
  }

  #invokeLlm(invocation) {
    const ask = () => this.#llm.ask(invocation, this.#send, this.#inflight);
    return this.#answers.answer(`llm:${invocation.request_id}`, ask, this.#send);
  }

  #finish(status) {
    this.#finished = true;
    this.#outbox.close();
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
    } else if (terminal.payload === 'runFailed') {
      const { code, message, result } = terminal.runFailed;
      this.#settle.reject(new RunFailedError(code, message, result));
    } else {
      this.#settle.resolve(partial);
    }
    this.#notify();
  }
}
