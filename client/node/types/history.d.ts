/**
 * Every event of a run's log after `afterSequence` that is stored now, oldest first.
 *
 * @param {(afterSequence: number) => Promise<{events: any[], lastSequence: number, finished: boolean}>} page
 *   reads one page
 * @param {number} afterSequence
 * @returns {AsyncGenerator<any, void, undefined>}
 */
export function pagedEvents(page: (afterSequence: number) => Promise<{
    events: any[];
    lastSequence: number;
    finished: boolean;
}>, afterSequence: number): AsyncGenerator<any, void, undefined>;
/**
 * `result` with its records put back when the sidecar left them out (`historyOmitted`: too
 * many for one message): those in `seen` when they are all of them, else the ones `events`
 * (the run's whole log) carries.
 *
 * @param {any} result  a decoded `ToolCallRunResult`, or null
 * @param {() => AsyncIterable<any>} events
 * @param {RecordsSeen | null} [seen]  what a stream already carried
 */
export function withRecords(result: any, events: () => AsyncIterable<any>, seen?: RecordsSeen | null): Promise<any>;
/**
 * The records a stream's `tool_call_completed` events carried, and the order the model asked
 * for each iteration's calls (its `llmResponded` events): parallel calls complete in any
 * order, and a result's history is in the order asked.
 */
export class RecordsSeen {
    /** Take note of `event` (a decoded `RunEvent`). */
    add(event: any): void;
    get count(): number;
    /** The records, by iteration and then as the model asked (calls of unknown order last). */
    inOrder(): any[];
    #private;
}
