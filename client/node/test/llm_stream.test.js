// A streaming client-hosted LLM (an async generator) is closed whenever the session stops
// taking its pieces, and a piece that would lose what it says fails the run.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { WAIT_MS, collect, signalled, useSidecar, within } from './sidecar.js';

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

test('a streaming LLM that yields a bad piece is closed (its finally runs) before its run fails', async () => {
  let closed = false;
  async function* llm() {
    try {
      yield 'fine so far';
      yield 42;
      yield 'never taken';
    } finally {
      closed = true;
    }
  }
  const run = client.session({ prompt: 'go', llm }, { streamDeltas: true });
  const events = await collect(run);

  assert.equal(events.at(-1).payload, 'runFailed');
  assert.match(events.at(-1).runFailed.message, /piece 1 is number/);
  assert.equal(closed, true, "the generator's finally ran");
  await assert.rejects(run.result, /piece 1 is number/);
});

test('a streaming LLM stalled mid-answer is closed when its run is cancelled', async () => {
  const stalled = signalled();
  const closed = signalled();
  let request;
  async function* llm(req) {
    request = req;
    try {
      yield 'thinking';
      // Like a fetch given the signal: the wait for the model's next bytes ends when it aborts.
      await new Promise((_, reject) => {
        req.signal?.addEventListener('abort', () => reject(req.signal.reason));
        stalled.resolve();
      });
      yield 'never taken';
    } finally {
      closed.resolve();
    }
  }
  const run = client.session({ prompt: 'go', llm }, { streamDeltas: true });
  const events = collect(run);
  await stalled.promise;
  await run.cancel('enough');

  const seen = await events;
  assert.equal(seen.at(-1).payload, 'runCancelled');
  assert.deepEqual(
    seen.filter((e) => e.payload === 'llmDelta').map((e) => e.llmDelta.text),
    ['thinking'],
  );
  await within(closed.promise, WAIT_MS, "the stalled generator's finally");
  assert.equal(request.signal.aborted, true);
  assert.match(request.signal.reason.message, /the session has ended/);
});

for (const [what, piece, why] of [
  [
    'both text and a toolCallIndex',
    { text: 'lost?', toolCallIndex: 0, toolCallId: 'c1', toolName: 'echo', arguments: '{}' },
    /piece 1 has both text and a toolCallIndex/,
  ],
  [
    'arguments that are an object, not JSON text',
    { toolCallIndex: 0, toolCallId: 'c1', toolName: 'echo', arguments: { text: 'hi' } },
    /piece 1 has arguments that are an object, not a string/,
  ],
]) {
  test(`a streaming LLM's piece with ${what} fails its run, naming the piece`, async () => {
    async function* llm() {
      yield 'fine so far';
      yield piece;
    }
    const run = client.session({ prompt: 'go', llm }, { streamDeltas: true });
    const events = await collect(run);

    assert.equal(events.at(-1).payload, 'runFailed');
    assert.match(events.at(-1).runFailed.message, why);
    assert.equal(events.filter((e) => e.payload === 'llmDelta').length, 1, 'only the good piece was sent');
    await assert.rejects(run.result, why);
  });
}
