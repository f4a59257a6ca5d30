// A watcher's LLM deltas across reconnections: each piece of the model's answer yielded once.
import { withLegacyNames } from './names.js';

/**
 * After a reconnection the sidecar sends the current call's deltas again from index 0, joined
 * (`index`, `count`: which of the call's deltas a message holds). `DeltaDedup` remembers, per
 * call, the next delta index and how many text and per-tool-call argument characters were
 * yielded, and trims a resent piece to what is new; `connected()` marks a new connection.
 */
export class DeltaDedup {
  /** Per iteration: what was yielded (`next`, `text`, `args`) and what this connection brought. */
  #calls = new Map();

  /** A new connection: its deltas are counted afresh. */
  connected() {
    for (const call of this.#calls.values()) call.received = null;
  }

  /** The part of `event` (an `llmDelta`) not yielded yet, or `null` if nothing of it is new. */
  admit(event) {
    const delta = event.llmDelta;
    let call = this.#calls.get(delta.iteration);
    if (!call) {
      call = { next: 0, text: 0, args: new Map(), received: null };
      this.#calls.set(delta.iteration, call);
      while (this.#calls.size > 4) this.#calls.delete(this.#calls.keys().next().value);
    }
    if (call.received === null) {
      // The first piece of the call on this connection: from index 0 (a catch-up), or on from
      // where the last connection stopped.
      call.received =
        delta.index === 0
          ? { text: 0, args: new Map() }
          : { text: call.text, args: new Map(call.args) };
    }
    const end = delta.index + delta.count;
    const tool = delta.toolCallIndex;
    const seen = tool === null ? call.text : (call.args.get(tool) ?? 0);
    const at = tool === null ? call.received.text : (call.received.args.get(tool) ?? 0);
    const piece = tool === null ? delta.text : delta.arguments;
    if (tool === null) call.received.text = at + piece.length;
    else call.received.args.set(tool, at + piece.length);
    if (end <= call.next) return null; // all of it yielded already
    const fresh = piece.slice(Math.max(0, seen - at));
    const trimmed = withLegacyNames({
      ...delta,
      index: Math.max(delta.index, call.next),
      count: end - Math.max(delta.index, call.next),
    });
    if (tool === null) {
      trimmed.text = fresh;
      call.text = seen + fresh.length;
    } else {
      trimmed.arguments = fresh;
      if (call.args.has(tool) && delta.index < call.next) {
        trimmed.toolCallId = ''; // the call's first delta, with its id and name, was yielded
        trimmed.toolName = '';
      }
      call.args.set(tool, seen + fresh.length);
    }
    call.next = end;
    return withLegacyNames({ ...event, llmDelta: trimmed });
  }
}
