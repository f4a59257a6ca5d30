// The events of a streamed run (StreamToolLoop) or a followed one (FollowRun), one at a time.
import { onAbort } from './abort.js';
import { wireEvents } from './codec.js';
import { DeltaDedup } from './deltas.js';
import { Status, toSidecarError } from './errors.js';
import { RecordsSeen } from './history.js';

/** How many reconnections in a row may bring no event before a dropped watcher gives up. */
const MAX_FRUITLESS = 6;

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
export function eventStream({ open, current, options, watch, codec, complete }) {
  async function* events() {
    const seen = new RecordsSeen(); // for a result that leaves its records out
    const detach = onAbort(options.signal, () => current()?.cancel());
    let fruitless = 0; // reconnections in a row that brought no event
    const deltas = watch ? new DeltaDedup() : null; // a reconnection resends the call's deltas
    try {
      for (;;) {
        const call = open();
        deltas?.connected();
        const start = watch?.state.last;
        try {
          for await (const message of call) {
            // A message may hold a batch: its events are yielded one at a time, and a
            // watcher's resume point advances with each, so it is always the last event
            // actually yielded (a drop surfaces only after the batch in hand is yielded).
            for (const wire of wireEvents(message)) {
              let event = codec.decodeEvent(wire);
              if (deltas && event.payload === 'llmDelta') {
                event = deltas.admit(event);
                if (event === null) continue; // yielded already, before the reconnection
              }
              seen.add(event);
              const terminal = event[event.payload];
              if (terminal?.result?.historyOmitted) terminal.result = await complete(terminal.result, seen);
              if (watch && event.sequence) watch.state.last = event.sequence; // a delta's is 0
              yield event;
            }
            // Every event of the message is handled: acknowledge them if the sidecar asks.
            if (watch && message.ack_requested) watch.acknowledge(call, watch.state.last);
          }
          return;
        } catch (err) {
          const error = toSidecarError(err);
          if (watch) {
            fruitless = watch.state.last > start ? 0 : fruitless + 1;
            const dropped = error.code === Status.RESOURCE_EXHAUSTED;
            if (watch.resume && dropped && fruitless <= MAX_FRUITLESS && !options.signal?.aborted) {
              // Dropped for falling behind: reconnect after the last event we have, giving
              // the run a moment when the last attempt brought nothing.
              if (fruitless) await sleep(10 * 2 ** fruitless);
              continue;
            }
            error.afterSequence = watch.state.last;
          }
          throw error;
        } finally {
          call.cancel(); // a no-op once the call has ended; otherwise this run is given up
        }
      }
    } finally {
      detach();
    }
  }
  const stream = events();
  return Object.assign(stream, { cancel: () => current()?.cancel() });
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
