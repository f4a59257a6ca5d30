/**
 * @internal
 * An `EventStream` (see client.js) over the call `open` makes: its messages' events decoded
 * and yielded one at a time, a result that left its records out given them back (`complete`),
 * the call cancelled when `options.signal` aborts or the iteration is left. With `watch` (a
 * FollowRun), events are acknowledged, and a watcher the sidecar dropped reconnects after the
 * last event yielded, its deltas not yielded twice.
 *
 * @param {{open: () => any, current: () => any, options: {signal?: AbortSignal},
 *   watch: {state: {last: number}, resume: boolean, acknowledge: (call: any, sequence: number) => void} | null,
 *   codec: import('./codec.js').Codec, complete: (result: any, seen: RecordsSeen) => Promise<any>}} stream
 */
export function eventStream({ open, current, options, watch, codec, complete }: {
    open: () => any;
    current: () => any;
    options: {
        signal?: AbortSignal;
    };
    watch: {
        state: {
            last: number;
        };
        resume: boolean;
        acknowledge: (call: any, sequence: number) => void;
    } | null;
    codec: import("./codec.js").Codec;
    complete: (result: any, seen: RecordsSeen) => Promise<any>;
}): AsyncGenerator<import("./values.js").RunEvent, void, unknown> & {
    cancel: () => any;
};
import { RecordsSeen } from './history.js';
