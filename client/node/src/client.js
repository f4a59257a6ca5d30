// SidecarClient: every RPC of ToolRuntimeService, with JSON fields as plain values.
import grpc from '@grpc/grpc-js';

import { onAbort } from './abort.js';
import { OpenCalls } from './calls.js';
import { Codec } from './codec.js';
import { RunFailedError, toSidecarError } from './errors.js';
import { eventStream } from './events.js';
import { pagedEvents, withRecords } from './history.js';
import { camelKeys, withLegacyNames } from './names.js';
import { loadService } from './proto.js';
import { SessionRun } from './session.js';
import { normaliseTools } from './tools.js';

/** Trailing metadata under which `RunToolLoop` returns a failed run's partial result. */
export const RESULT_TRAILER = 'cleveragents-result-bin';

/**
 * @typedef {object} CallOptions
 * @property {number} [timeoutMs]  the call's deadline, from now; it is also the run's budget
 * @property {Date | number} [deadline]  an absolute deadline instead (Date or epoch ms)
 * @property {AbortSignal} [signal]  aborting it cancels the call (and so its run, unless detached)
 * @property {Record<string, string>} [metadata]  extra request headers
 * @property {boolean} [streamDeltas]  also yield the model's answer as it streams, as
 *   `llmDelta` events (sequence 0); off, the stream holds the logged events only
 */

/**
 * @typedef {object} ClientOptions
 * @property {import('@grpc/grpc-js').ChannelCredentials} [credentials]  insecure by default
 * @property {Record<string, string>} [metadata]  headers sent with every call
 * @property {Record<string, any>} [channelOptions]  grpc-js channel options (message size
 *   limits default to the sidecar's 16 MiB)
 * @property {import('./codec.js').Json} [json]  JSON text parser/serialiser (default: `JSON`)
 * @property {string} [protosDir]  where `cleveragents/toolruntime/v1/*.proto` live
 */

/**
 * @typedef {AsyncGenerator<import('./values.js').RunEvent, void, undefined> & {cancel(): void}} EventStream
 *   The events of a run, ending after its terminal event. `cancel()` (or leaving a `for await`
 *   loop early) cancels the call. A non-OK status is thrown as a `SidecarError`. Messages are
 *   read only as fast as they are consumed (gRPC flow control applies back-pressure). The call
 *   asks the sidecar to batch events (`batch_events`); batches are unpacked here, so each step
 *   of the iteration is still exactly one event, in sequence order.
 */

const SESSION_KEYS = new Set(['tools', 'llm', 'approver']);
/** The sidecar's default `max_message_bytes` is 16 MiB; grpc-js would stop receiving at 4 MiB. */
const MESSAGE_BYTES = 16 * 1024 * 1024;
const DEFAULT_CHANNEL_OPTIONS = Object.freeze({
  'grpc.max_receive_message_length': MESSAGE_BYTES,
  'grpc.max_send_message_length': MESSAGE_BYTES,
});

export class SidecarClient {
  /**
   * @param {string} target  `host:port` or `unix:/path`
   * @param {ClientOptions} [options]
   */
  constructor(target, options = {}) {
    const { Service } = loadService(options.protosDir);
    this.codec = new Codec(options.json ?? JSON);
    this.metadata = options.metadata ?? {};
    /** @type {any} The underlying grpc-js client, for anything this wrapper does not cover. */
    this.stub = new Service(target, options.credentials ?? grpc.credentials.createInsecure(), {
      ...DEFAULT_CHANNEL_OPTIONS,
      ...options.channelOptions,
    });
    this.#resultOf = Service.service.RunToolLoop.responseDeserialize;
  }

  #resultOf;
  #open = new OpenCalls();

  /**
   * Close the channel, and cancel the calls still under way (they end with CANCELLED, and a
   * session with `reattach` finds nothing to re-attach with): nothing of this client is left
   * to keep the process running.
   */
  close() {
    this.stub.close();
    this.#open.cancelAll();
  }

  /**
   * Resolve once the channel is connected (rejects after `timeoutMs`).
   *
   * @param {number} [timeoutMs]
   * @returns {Promise<void>}
   */
  waitForReady(timeoutMs = 5000) {
    return new Promise((resolve, reject) => {
      this.stub.waitForReady(Date.now() + timeoutMs, (err) => (err ? reject(err) : resolve()));
    });
  }

  /**
   * Run the loop with the sidecar's tools and LLM; resolves with the final result (also for a
   * cancelled run: see `stopReason`). A failed run rejects with a `RunFailedError` carrying
   * the partial result; a refused request with a `SidecarError`.
   *
   * @param {string | import('./values.js').RunSpecInput} spec
   * @param {CallOptions} [options]
   * @returns {Promise<import('./values.js').ToolCallRunResult>}
   */
  async runToolLoop(spec, options = {}) {
    const request = { spec: this.codec.encodeSpec(spec) };
    let response;
    try {
      response = await this.#unary('RunToolLoop', request, options);
    } catch (err) {
      const error = this.#runError(err);
      // A partial result comes without its records when they are too many for one message.
      if (error instanceof RunFailedError) error.result = await this.#complete(error.result, options);
      throw error;
    }
    return this.#complete(this.codec.decodeResult(response.result), options);
  }

  /**
   * Start a run and stream its events as they happen. The call is made when iteration begins.
   *
   * @param {string | import('./values.js').RunSpecInput} spec
   * @param {CallOptions} [options]
   * @returns {EventStream}
   */
  streamToolLoop(spec, options = {}) {
    const request = {
      spec: this.codec.encodeSpec(spec),
      batch_events: true,
      stream_deltas: Boolean(options.streamDeltas),
    };
    let call;
    const open = () => {
      call = this.#open.track(this.stub.StreamToolLoop(request, this.#metadata(options), this.#options(options)));
      return call;
    };
    return this.#eventStream(open, () => call, options, null);
  }

  /**
   * Follow a run by id: the events after `afterSequence` (replayed), then live ones until the
   * run ends. It follows with acknowledgements (FollowRun): an event counts as handled once
   * the next one is asked for, and the sidecar sends no more than its window ahead of that.
   * When the sidecar drops this watcher (`RESOURCE_EXHAUSTED`: it fell too far behind, or
   * stopped taking events), it reconnects from the last event it yielded, unless `resume` is
   * false; the error then carries `afterSequence` to reconnect with. With `streamDeltas`, an
   * iteration's `llmResponded` supersedes its `llmDelta`s (a preview: replace the streamed
   * text with its `content`); after a reconnection past a call's end its deltas may not come.
   *
   * @param {string} runId
   * @param {{afterSequence?: number, resume?: boolean, signal?: AbortSignal,
   *   metadata?: Record<string, string>, streamDeltas?: boolean}} [options]
   * @returns {EventStream}
   */
  watchRun(runId, options = {}) {
    const state = { last: options.afterSequence ?? 0 };
    let call;
    const open = () => {
      call = this.#open.track(this.stub.FollowRun(this.#metadata(options), {}));
      call.write({
        start: { run_id: runId, after_sequence: state.last, stream_deltas: Boolean(options.streamDeltas) },
      });
      return call;
    };
    return this.#eventStream(open, () => call, options, {
      state,
      resume: options.resume ?? true,
      acknowledge: (followed, sequence) => {
        try {
          followed.write({ ack: { sequence } });
        } catch {
          // The call has ended: reading on reports how.
        }
      },
    });
  }

  /**
   * A run's state (`"RUN_STATE_RUNNING"`, `_COMPLETED`, `_FAILED`, `_CANCELLED`), the sequence
   * of its newest event, and its result once it has ended (`null` before).
   *
   * @param {string} runId
   * @returns {Promise<{runId: string, state: import('./values.js').RunState, lastSequence: number,
   *   result: import('./values.js').ToolCallRunResult | null}>}
   */
  async getRun(runId, options = {}) {
    return this.#mapped(async () => {
      const response = await this.#unary('GetRun', { run_id: runId }, options);
      const result = await this.#complete(this.codec.decodeResult(response.result), options);
      return withLegacyNames({ ...camelKeys({ ...response, result: null }), result });
    });
  }

  /**
   * One page of a run's log (GetRunHistory): the events after `afterSequence`, oldest first,
   * as many as fit in `maxBytes` (0: the sidecar's page size), with `lastSequence` (the
   * newest event stored) and `finished` (the run had ended).
   *
   * @param {string} runId
   * @param {CallOptions & {afterSequence?: number, maxBytes?: number}} [options]
   * @returns {Promise<{events: import('./values.js').RunEvent[], lastSequence: number, finished: boolean}>}
   */
  async getRunHistory(runId, options = {}) {
    const request = { run_id: runId, after_sequence: options.afterSequence ?? 0, max_bytes: options.maxBytes ?? 0 };
    const page = await this.#mapped(() => this.#unary('GetRunHistory', request, options));
    const events = page.events.map((e) => this.codec.decodeEvent(e));
    return withLegacyNames({ ...camelKeys({ ...page, events: [] }), events });
  }

  /**
   * Every event of a run's log after `afterSequence` that is stored now, read page by page
   * with `getRunHistory`: each page is one bounded message, so any run can be read back.
   *
   * @param {string} runId
   * @param {CallOptions & {afterSequence?: number, maxBytes?: number}} [options]
   * @returns {AsyncGenerator<import('./values.js').RunEvent, void, undefined>}
   */
  async *runHistory(runId, options = {}) {
    yield* pagedEvents((after) => this.getRunHistory(runId, { ...options, afterSequence: after }), options.afterSequence ?? 0);
  }

  /**
   * Cancel a live run; resolves with its state afterwards (`"RUN_STATE_CANCELLED"`, or how it
   * ended if it had already ended).
   *
   * @param {string} runId
   * @param {string} [reason]
   * @returns {Promise<import('./values.js').RunState>}
   */
  async cancelRun(runId, reason = '', options = {}) {
    const response = await this.#mapped(() => this.#unary('CancelRun', { run_id: runId, reason }, options));
    return response.state;
  }

  /**
   * The sidecar's own tools.
   *
   * @returns {Promise<import('./values.js').ToolSpec[]>}
   */
  async listTools(options = {}) {
    const response = await this.#mapped(() => this.#unary('ListTools', {}, options));
    return response.tools.map((t) => this.codec.decodeToolSpec(t));
  }

  /**
   * Run a loop whose tools live in this process. `tools` maps names to plain functions (sync
   * or async) or to `{description, inputSchema, timeout, sideEffects, idempotent, handler}`;
   * an array of named functions or definitions works too. A tool receives the inputs object and
   * a call context (`callId`, `toolName`, `iteration`, `deadline`, `idempotencyKey`,
   * `signal`) and returns any JSON value: an object is the output, anything else `x` becomes
   * `{"result": x}`. A tool
   * that throws fails its call (a record with `success: false`), and the loop goes on. A tool
   * with `sideEffects` is gated by the run's automation profile like the sidecar's own.
   *
   * `llm` is either an `LlmSelection` (`{profile, model, script}`, the sidecar's LLM) or a
   * function `(request) => response` (sync or async): then this process is the LLM. An async
   * generator function streams its answer: each piece it yields (`LlmDeltaInput`) reaches the
   * run's `streamDeltas` streams and watchers at once, and what it returns is the answer (or
   * nothing: the answer its pieces spell).
   * `approver` (sync or async) decides the run's approval requests: without one they wait for
   * a watcher, the DecideApproval RPC or the CLI.
   *
   * @param {import('./values.js').RunSpecInput & {
   *   tools?: Record<string, import('./tools.js').ToolLike> | import('./tools.js').ToolLike[],
   *   llm?: import('./values.js').RunSpecInput['llm']
   *     | ((request: import('./hosted_llm.js').LlmRequest) => any)
   *     | ((request: import('./hosted_llm.js').LlmRequest) => AsyncIterable<import('./llm_stream.js').LlmDeltaInput>),
   *   approver?: import('./approvals.js').Approver}} spec
   * @param {CallOptions & {reattach?: boolean, reattachTimeoutMs?: number}} [options]
   *   with `reattach: true`, a stream that breaks (the connection dropped, the sidecar
   *   restarted) is opened again for up to `reattachTimeoutMs` (default 60 000) from the
   *   break and re-attaches to the run after the last event seen: the same tools serve it, a
   *   call still running goes on, and one answered already is answered again, not run twice.
   * @returns {SessionRun}
   */
  session(spec, options = {}) {
    if (typeof spec === 'string') spec = { prompt: spec };
    const { tools, llm, approver, ...rest } = spec;
    if (approver !== undefined && approver !== null && typeof approver !== 'function') {
      throw new TypeError(`a session's approver is a function (request) => decision, not ${typeof approver}`);
    }
    const clientLlm = typeof llm === 'function';
    const wireSpec = this.codec.encodeSpec(clientLlm ? rest : { ...rest, llm }, SESSION_KEYS);
    const definitions = normaliseTools(tools);
    const start = {
      spec: wireSpec,
      tools: [...definitions.values()].map((t) => this.codec.encodeToolSpec(t)),
      client_llm: clientLlm,
      batch_events: true, // SessionRun unpacks SessionResponse.events
      incremental_messages: clientLlm, // SessionRun keeps the conversation
      handles_approvals: typeof approver === 'function', // SessionRun answers approval_requested
      stream_deltas: Boolean(options.streamDeltas),
    };
    const run = new SessionRun({
      openCall: () => this.#open.track(this.stub.Session(this.#metadata(options), this.#options(options))),
      codec: this.codec,
      tools: definitions,
      llm: clientLlm ? llm : null,
      approver: approver ?? null,
      start,
      reattach: options.reattach === true,
      reattachTimeoutMs: options.reattachTimeoutMs ?? 60_000,
    });
    const forget = onAbort(options.signal, () => run.abort());
    run.result.then(forget, forget);
    return run;
  }

  // -- plumbing ----------------------------------------------------------------------------

  /** `result` with its records put back when it came without them (too large for a message). */
  #complete(result, options = {}, seen = null) {
    return withRecords(result, () => this.runHistory(result.runId, { metadata: options.metadata }), seen);
  }

  #metadata(options) {
    const metadata = new grpc.Metadata();
    for (const [key, value] of Object.entries({ ...this.metadata, ...options.metadata })) {
      metadata.set(key, value);
    }
    return metadata;
  }

  #options(options) {
    if (options.deadline !== undefined) return { deadline: options.deadline };
    if (options.timeoutMs !== undefined) return { deadline: Date.now() + options.timeoutMs };
    return {};
  }

  /** What `work` resolves with; a gRPC failure it throws becomes a `SidecarError`. */
  async #mapped(work) {
    try {
      return await work();
    } catch (err) {
      throw toSidecarError(err);
    }
  }

  #unary(method, request, options) {
    return new Promise((resolve, reject) => {
      const call = this.#open.track(
        this.stub[method](request, this.#metadata(options), this.#options(options), (err, response) => {
          detach();
          if (err) reject(err);
          else resolve(response);
        }),
      );
      const detach = onAbort(options.signal, () => call.cancel());
    });
  }

  /** A `RunFailedError` when the status carries a run's partial result, else a `SidecarError`. */
  #runError(err) {
    const error = toSidecarError(err);
    const trailer = err?.metadata?.get?.(RESULT_TRAILER)?.[0];
    if (!Buffer.isBuffer(trailer)) return error;
    // The trailer holds a serialised ToolCallRunResult. Prefixed with the tag of field 1 and
    // its length it is a RunToolLoopResponse, which this client already knows how to decode.
    const response = this.#resultOf(Buffer.concat([Buffer.from([0x0a]), varint(trailer.length), trailer]));
    return new RunFailedError(
      error.code,
      error.details,
      this.codec.decodeResult(response.result),
      error.metadata,
    );
  }

  #eventStream(open, current, options, watch) {
    const complete = (result, seen) => this.#complete(result, options, seen);
    return eventStream({ open, current, options, watch, codec: this.codec, complete });
  }
}

function varint(n) {
  const bytes = [];
  while (n > 0x7f) {
    bytes.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  bytes.push(n);
  return Buffer.from(bytes);
}
