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
export function abortAt(controller: AbortController, deadline: Date | null, reason: Error): ReturnType<typeof setTimeout> | undefined;
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
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T>;
/**
 * @internal
 * Call `fn` when `signal` aborts (now, if it already has); returns the unsubscriber.
 *
 * @param {AbortSignal | undefined} signal
 * @param {() => void} fn
 * @returns {() => void}
 */
export function onAbort(signal: AbortSignal | undefined, fn: () => void): () => void;
