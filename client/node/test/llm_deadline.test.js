// A client-hosted LLM still answering at the sidecar's deadline for its invocation is told
// (its request's signal aborts), closed if it streams, and its late answer is not sent.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { SidecarClient, Status } from '../src/index.js';
import { WAIT_MS, collect, signalled, startSidecar, within } from './sidecar.js';

let sidecar;
let client;

before(async () => {
  // A sidecar that waits only half a second for its client's LLM answers.
  sidecar = await startSidecar([], { CLEVERAGENTS_SIDECAR_CLIENT_LLM_TIMEOUT_S: '0.5' });
  client = new SidecarClient(sidecar.address);
});

after(async () => {
  client?.close();
  await sidecar?.stop();
});

// The client's timer for the deadline and the sidecar's own (which ends the session) race.
const STOPPED = /the sidecar's deadline for LLM request llm_1 has passed|the session has ended/;

/** The run ended with the sidecar's own DEADLINE_EXCEEDED for `llm_1`. */
async function assertTimedOut(run) {
  const events = await collect(run);
  const failed = events.at(-1);
  assert.equal(failed.payload, 'runFailed');
  assert.equal(failed.runFailed.code, Status.DEADLINE_EXCEEDED);
  assert.match(failed.runFailed.message, /did not answer LLM invocation 'llm_1' within 0.5s/);
  await assert.rejects(run.result, /did not answer LLM invocation/);
  return events;
}

test('a streaming LLM still streaming at its deadline has its signal aborted and is closed', async () => {
  const closed = signalled();
  let request;
  async function* llm(req) {
    request = req;
    try {
      yield 'thinking';
      await new Promise((_, reject) => req.signal?.addEventListener('abort', () => reject(req.signal.reason)));
      yield 'never taken';
    } finally {
      closed.resolve();
    }
  }
  await assertTimedOut(client.session({ prompt: 'go', llm }, { streamDeltas: true }));

  await within(closed.promise, WAIT_MS, "the generator's finally");
  assert.ok(request.deadline instanceof Date, 'the request carries its deadline');
  assert.equal(request.signal.aborted, true);
  assert.match(request.signal.reason.message, STOPPED);
});

test('an LLM whose promise is pending at its deadline has its signal aborted, and its late answer is not sent', async () => {
  const answered = signalled();
  let request;
  const llm = (req) => {
    request = req;
    // It answers only once told to stop: that answer is too late and must not be sent.
    return new Promise((resolve) =>
      req.signal?.addEventListener('abort', () => {
        resolve('too late');
        answered.resolve();
      }),
    );
  };
  await assertTimedOut(client.session({ prompt: 'go', llm }));

  await within(answered.promise, WAIT_MS, 'the abort');
  assert.match(request.signal.reason.message, STOPPED);
});
