// Reading a run's log page by page (GetRunHistory), and results given their records back.
import { withLegacyNames } from './names.js';

/**
 * Every event of a run's log after `afterSequence` that is stored now, oldest first.
 *
 * @param {(afterSequence: number) => Promise<{events: any[], lastSequence: number, finished: boolean}>} page
 *   reads one page
 * @param {number} afterSequence
 * @returns {AsyncGenerator<any, void, undefined>}
 */
export async function* pagedEvents(page, afterSequence) {
  let after = afterSequence;
  for (;;) {
    const { events, lastSequence: last, finished } = await page(after);
    yield* events;
    if (events.length === 0) return;
    after = events[events.length - 1].sequence;
    if (finished && after >= last) return;
  }
}

/**
 * The records a stream's `tool_call_completed` events carried, and the order the model asked
 * for each iteration's calls (its `llmResponded` events): parallel calls complete in any
 * order, and a result's history is in the order asked.
 */
export class RecordsSeen {
  #records = [];
  #asked = new Map();

  /** Take note of `event` (a decoded `RunEvent`). */
  add(event) {
    if (event.payload === 'toolCallCompleted') this.#records.push(event.toolCallCompleted.record);
    if (event.payload === 'llmResponded') {
      const { iteration, toolCalls: calls } = event.llmResponded;
      calls.forEach((call, index) => this.#asked.set(`${iteration}:${call.id}`, index));
    }
  }

  get count() {
    return this.#records.length;
  }

  /** The records, by iteration and then as the model asked (calls of unknown order last). */
  inOrder() {
    const rank = (r) => this.#asked.get(`${r.iteration}:${r.callId}`) ?? Number.MAX_SAFE_INTEGER;
    return [...this.#records].sort((a, b) => a.iteration - b.iteration || rank(a) - rank(b));
  }
}

/**
 * `result` with its records put back when the sidecar left them out (`historyOmitted`: too
 * many for one message): those in `seen` when they are all of them, else the ones `events`
 * (the run's whole log) carries.
 *
 * @param {any} result  a decoded `ToolCallRunResult`, or null
 * @param {() => AsyncIterable<any>} events
 * @param {RecordsSeen | null} [seen]  what a stream already carried
 */
export async function withRecords(result, events, seen = null) {
  if (!result?.historyOmitted) return result;
  let records = seen;
  if (!records || records.count !== result.toolCallCount) {
    records = new RecordsSeen();
    for await (const event of events()) records.add(event);
  }
  return withLegacyNames({ ...result, toolCallHistory: records.inOrder() });
}
