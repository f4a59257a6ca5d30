// DeltaDedup: a watcher's deltas resent after a reconnection are trimmed to what is new.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DeltaDedup } from '../src/deltas.js';

const text = (index, count, value) => ({
  payload: 'llm_delta',
  llm_delta: { iteration: 1, text: value, tool_call_index: null, tool_call_id: '', tool_name: '', arguments: '', index, count },
});
const args = (index, count, value, first = false) => ({
  payload: 'llm_delta',
  llm_delta: {
    iteration: 1, text: '', tool_call_index: 0, arguments: value, index, count,
    tool_call_id: first ? 'c1' : '', tool_name: first ? 'echo' : '',
  },
});

test('a joined catch-up after a reconnection yields only the text and arguments not yielded', () => {
  const dedup = new DeltaDedup();
  const yielded = [text(0, 1, 'Hel'), text(1, 1, 'lo '), args(2, 1, '{"a":', true)].map((e) => dedup.admit(e));
  assert.deepEqual(yielded.map((e) => e.llm_delta.index), [0, 1, 2]);

  dedup.connected(); // the sidecar resends the call from index 0, joined
  assert.equal(dedup.admit(text(0, 2, 'Hello ')), null);
  const rest = dedup.admit(args(2, 3, '{"a": 12}', true));
  assert.deepEqual(
    [rest.llm_delta.index, rest.llm_delta.count, rest.llm_delta.arguments, rest.llm_delta.tool_call_id],
    [3, 2, ' 12}', ''],
  );
  const live = dedup.admit(args(5, 1, ' '));
  assert.deepEqual([live.llm_delta.index, live.llm_delta.arguments], [5, ' ']);
});

test('a catch-up whose text runs past what was yielded yields the rest, numbered on', () => {
  const dedup = new DeltaDedup();
  dedup.admit(text(0, 1, 'ab'));
  dedup.connected();
  const rest = dedup.admit(text(0, 3, 'abcdef'));
  assert.deepEqual([rest.llm_delta.index, rest.llm_delta.count, rest.llm_delta.text], [1, 2, 'cdef']);
});
