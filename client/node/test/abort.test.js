// The signal helpers behind an invocation's deadline, and a stream left when its signal aborts.
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { test } from 'node:test';

import { abortAt, untilAborted } from '../src/abort.js';
import { streamAnswer } from '../src/llm_stream.js';
import { WAIT_MS, signalled, within } from './sidecar.js';

test('abortAt aborts with its reason at a deadline, and arms nothing without one or beyond setTimeout', async () => {
  const passed = new AbortController();
  const reason = new Error('the deadline passed');
  abortAt(passed, new Date(Date.now() - 1000), reason);
  await within(new Promise((resolve) => passed.signal.addEventListener('abort', resolve)), WAIT_MS, 'the abort');
  assert.equal(passed.signal.reason, reason);

  const far = new AbortController();
  assert.equal(abortAt(far, null, reason), undefined);
  assert.equal(abortAt(far, new Date(Date.now() + 40 * 86_400_000), reason), undefined); // would fire at once
  const soon = abortAt(far, new Date(Date.now() + 60_000), reason);
  assert.ok(soon);
  clearTimeout(soon);
  assert.equal(far.signal.aborted, false);
});

test('untilAborted rejects with the reason when its signal aborts, and leaves no listener behind', async () => {
  const controller = new AbortController();
  for (let i = 0; i < 20; i += 1) assert.equal(await untilAborted(Promise.resolve(i), controller.signal), i);
  assert.equal(getEventListeners(controller.signal, 'abort').length, 0);
  const pending = untilAborted(new Promise(() => {}), controller.signal);
  controller.abort(new Error('stop'));
  await assert.rejects(pending, /stop/);
  await assert.rejects(untilAborted(Promise.resolve(1), controller.signal), /stop/); // aborted already
});

test('streamAnswer stops waiting for a stalled generator when its signal aborts, and closes it once it yields', async () => {
  const stalled = signalled();
  const gate = signalled();
  const closed = signalled();
  const taken = [];
  async function* stream() {
    try {
      yield 'a';
      stalled.resolve();
      await gate.promise; // a stall that ignores the signal
      taken.push('b');
      yield 'b';
      taken.push('c');
      yield 'c';
    } finally {
      closed.resolve();
    }
  }
  const sent = [];
  const controller = new AbortController();
  const answering = streamAnswer(stream(), 'llm_1', async (m) => sent.push(m), controller.signal);
  await stalled.promise;
  controller.abort(new Error('the deadline passed'));

  await assert.rejects(answering, /the deadline passed/);
  gate.resolve();
  await within(closed.promise, WAIT_MS, "the generator's finally");
  assert.deepEqual(taken, ['b'], 'closed at its next yield');
  assert.deepEqual(sent.map((m) => m.llm_delta.text), ['a']);
});
