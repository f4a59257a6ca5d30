/**
 * After a reconnection the sidecar sends the current call's deltas again from index 0, joined
 * (`index`, `count`: which of the call's deltas a message holds). `DeltaDedup` remembers, per
 * call, the next delta index and how many text and per-tool-call argument characters were
 * yielded, and trims a resent piece to what is new; `connected()` marks a new connection.
 */
export class DeltaDedup {
    /** A new connection: its deltas are counted afresh. */
    connected(): void;
    /** The part of `event` (an `llmDelta`) not yielded yet, or `null` if nothing of it is new. */
    admit(event: any): any;
    #private;
}
