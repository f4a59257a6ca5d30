// AbortSignal helpers: a deadline that aborts the work a session does for the sidecar, waiting
// on a promise only until its work is aborted, and a caller's signal that cancels a call.

/** setTimeout's longest delay: a longer one would fire at once (Node's TimeoutOverflowWarning). */
const LONGEST_MS = 2 ** 31 - 1;

/**
 * @internal
 * Abort `controller` with `reason` at `deadline` (a Date, or null for none), and return the
 * timer to clear once the work is done. A deadline beyond setTimeout's reach (~24.8 days) arms
 * no timer, rather than one that would fire at once; the session's end still aborts it.
 *
 * @param {AbortController} controller
 * @param {Date | null} deadline
 * @param {Error} reason
 * @returns {ReturnType<typeof setTimeout> | undefined}
 */
export function abortAt(controller, deadline, reason) {
  if (!deadline) return undefined;
  const delay = Math.max(0, deadline.getTime() - Date.now());
  if (delay > LONGEST_MS) return undefined;
  const timer = setTimeout(() => controller.abort(reason), delay);
  timer.unref();
  return timer;
}

/**
 * @internal
 * What `promise` settles to, or a rejection with the signal's reason as soon as `signal`
 * aborts (at once if it has): the caller stops waiting, while the work itself goes on until
 * it heeds the signal. Its listener is removed either way, so one signal serves many waits.
 *
 * @template T
 * @param {Promise<T>} promise
 * @param {AbortSignal} signal
 * @returns {Promise<T>}
 */
export async function untilAborted(promise, signal) {
  if (signal.aborted) {
    promise.catch(() => {}); // abandoned: its failure is nobody's to hear
    throw signal.reason;
  }
  let onAbort = () => {};
  const aborted = new Promise((_, reject) => {
    onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    return await Promise.race([promise, aborted]);
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}

/**
 * @internal
 * Call `fn` when `signal` aborts (now, if it already has); returns the unsubscriber.
 *
 * @param {AbortSignal | undefined} signal
 * @param {() => void} fn
 * @returns {() => void}
 */
export function onAbort(signal, fn) {
  if (!signal) return () => {};
  if (signal.aborted) {
    queueMicrotask(fn);
    return () => {};
  }
  signal.addEventListener('abort', fn, { once: true });
  return () => signal.removeEventListener('abort', fn);
}
