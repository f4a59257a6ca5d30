// Reading a run's log page by page (GetRunHistory), and results given their records back.

/**
 * Every event of a run's log after `afterSequence` that is stored now, oldest first.
 *
 * @param {(afterSequence: number) => Promise<{events: any[], last_sequence: number, finished: boolean}>} page
 *   reads one page
 * @param {number} afterSequence
 * @returns {AsyncGenerator<any, void, undefined>}
 */
export async function* pagedEvents(page, afterSequence) {
  let after = afterSequence;
  for (;;) {
    const { events, last_sequence: last, finished } = await page(after);
    yield* events;
    if (events.length === 0) return;
    after = events[events.length - 1].sequence;
    if (finished && after >= last) return;
  }
}

/**
 * `result` with its records put back when the sidecar left them out (`history_omitted`: too
 * many for one message): those in `seen` when they are all of them, else the ones `events`
 * (the run's whole log) carries.
 *
 * @param {any} result  a decoded `ToolCallRunResult`, or null
 * @param {() => AsyncIterable<any>} events
 * @param {any[] | null} [seen]  the records a stream already carried
 */
export async function withRecords(result, events, seen = null) {
  if (!result?.history_omitted) return result;
  let records = seen;
  if (!records || records.length !== result.tool_call_count) {
    records = [];
    for await (const event of events()) {
      if (event.payload === 'tool_call_completed') records.push(event.tool_call_completed.record);
    }
  }
  return { ...result, tool_call_history: records };
}
