/**
 * @internal
 * The calls opened and not yet ended (each ends with its 'status' event).
 */
export class OpenCalls {
    /**
     * Track `call` until its status comes; returns it.
     *
     * @template {{cancel(): void, once(event: 'status', listener: () => void): any}} C
     * @param {C} call
     * @returns {C}
     */
    track<C extends {
        cancel(): void;
        once(event: "status", listener: () => void): any;
    }>(call: C): C;
    /** Cancel every call still under way: each ends with CANCELLED. */
    cancelAll(): void;
    #private;
}
