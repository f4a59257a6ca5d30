// A streaming client-hosted LLM's pieces go several to a message while a write is under way,
// to a sidecar whose invocation takes them so; one by one to any other.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { MAX_DELTAS_A_MESSAGE, streamAnswer } from '../src/llm_stream.js';
import { collect, useSidecar } from './sidecar.js';

/** A send whose every write takes until the next turn of the event loop, keeping each message. */
function slowSend(sent) {
  return async (message) => {
    sent.push(message);
    await new Promise((resolve) => setImmediate(resolve));
  };
}

async function* pieces(count) {
  for (let i = 0; i < count; i += 1) yield `${i} `;
}

/** Every delta sent, in order, however many a message carried. */
function deltasOf(sent) {
  return sent.flatMap((m) => (m.llm_deltas ? m.llm_deltas.deltas : [m.llm_delta]));
}

test('the pieces taken while a write is under way go together in the next message', async () => {
  const sent = [];
  const answer = await streamAnswer(pieces(10), 'llm_1', slowSend(sent), new AbortController().signal, true);

  assert.deepEqual(Object.keys(sent[0]), ['llm_delta']); // the first goes at once, alone
  assert.deepEqual(Object.keys(sent[1]), ['llm_deltas']);
  assert.equal(sent.length, 2);
  assert.deepEqual(deltasOf(sent).map((d) => [d.request_id, d.index]), [...Array(10).keys()].map((i) => ['llm_1', i]));
  assert.equal(answer.content, deltasOf(sent).map((d) => d.text).join(''));
});

test('no more pieces are taken ahead of the writes than one message carries', async () => {
  const sent = [];
  await streamAnswer(pieces(1000), 'llm_1', slowSend(sent), new AbortController().signal, true);

  assert.ok(sent.every((m) => (m.llm_deltas?.deltas.length ?? 1) <= MAX_DELTAS_A_MESSAGE));
  assert.deepEqual(deltasOf(sent).map((d) => d.index), [...Array(1000).keys()]);
  assert.ok(sent.length < 1000 / 2, `${sent.length} messages for 1000 pieces`);
});

test('without accepts_delta_batches each piece goes in an llm_delta of its own', async () => {
  const sent = [];
  await streamAnswer(pieces(10), 'llm_1', slowSend(sent), new AbortController().signal, false);

  assert.deepEqual(sent.map((m) => Object.keys(m)), Array(10).fill(['llm_delta']));
});

test('a failed write ends the answer with its error', async () => {
  let writes = 0;
  const send = async () => {
    writes += 1;
    await new Promise((resolve) => setImmediate(resolve));
    throw new Error('the stream broke');
  };

  await assert.rejects(streamAnswer(pieces(10), 'llm_1', send, new AbortController().signal, true), /the stream broke/);
  assert.equal(writes, 1);
});

let sidecar;
let client;

before(async () => {
  sidecar = await useSidecar();
  client = new SidecarClient(sidecar.address);
});

after(async () => {
  client?.close();
  await sidecar?.stop();
});

test('a sidecar takes an LLM that streams faster than it is written, every piece in order', async () => {
  const llm = () => pieces(2000);
  const events = await collect(client.session({ prompt: 'go', llm }, { streamDeltas: true }));

  assert.equal(events.at(-1).payload, 'runCompleted');
  const expected = [...Array(2000).keys()].map((i) => `${i} `).join('');
  assert.equal(events.at(-1).runCompleted.result.content, expected);
  const streamed = events.filter((e) => e.payload === 'llmDelta').map((e) => e.llmDelta.text);
  assert.equal(streamed.join(''), expected);
});
