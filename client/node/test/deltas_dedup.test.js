// DeltaDedup: a watcher's deltas resent after a reconnection are trimmed to what is new.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DeltaDedup } from '../src/deltas.js';

const text = (index, count, value) => ({
  payload: 'llmDelta',
  llmDelta: { iteration: 1, text: value, toolCallIndex: null, toolCallId: '', toolName: '', arguments: '', index, count },
});
const args = (index, count, value, first = false) => ({
  payload: 'llmDelta',
  llmDelta: {
    iteration: 1, text: '', toolCallIndex: 0, arguments: value, index, count,
    toolCallId: first ? 'c1' : '', toolName: first ? 'echo' : '',
  },
});

test('a joined catch-up after a reconnection yields only the text and arguments not yielded', () => {
  const dedup = new DeltaDedup();
  const yielded = [text(0, 1, 'Hel'), text(1, 1, 'lo '), args(2, 1, '{"a":', true)].map((e) => dedup.admit(e));
  assert.deepEqual(yielded.map((e) => e.llmDelta.index), [0, 1, 2]);

  dedup.connected(); // the sidecar resends the call from index 0, joined
  assert.equal(dedup.admit(text(0, 2, 'Hello ')), null);
  const rest = dedup.admit(args(2, 3, '{"a": 12}', true));
  assert.deepEqual(
    [rest.llmDelta.index, rest.llmDelta.count, rest.llmDelta.arguments, rest.llmDelta.toolCallId],
    [3, 2, ' 12}', ''],
  );
  const live = dedup.admit(args(5, 1, ' '));
  assert.deepEqual([live.llmDelta.index, live.llmDelta.arguments], [5, ' ']);
});

test('a catch-up whose text runs past what was yielded yields the rest, numbered on', () => {
  const dedup = new DeltaDedup();
  dedup.admit(text(0, 1, 'ab'));
  dedup.connected();
  const rest = dedup.admit(text(0, 3, 'abcdef'));
  assert.deepEqual([rest.llmDelta.index, rest.llmDelta.count, rest.llmDelta.text], [1, 2, 'cdef']);
});
