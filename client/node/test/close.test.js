// Closing a client ends the calls it has under way (grpc-js's close() alone lets them run on,
// holding the connection open): each ends with CANCELLED, and nothing is left to keep the
// process running (guard.js checks that at the end of this file).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { SidecarClient, Status } from '../src/index.js';
import { WAIT_MS, callTurn, runId, script, signalled, useSidecar, within } from './sidecar.js';

let sidecar;

before(async () => {
  sidecar = await useSidecar();
});

after(async () => {
  await sidecar?.stop();
});

/** A session whose one tool call is never answered, once that call has begun. */
async function stuckSession(client, options = {}) {
  const called = signalled();
  const run = client.session(
    {
      prompt: 'p',
      runId: runId('close'),
      llm: script(callTurn('', ['r1', 'remote', {}]), { content: 'done' }),
      tools: {
        remote: () => {
          called.resolve();
          return new Promise(() => {});
        },
      },
    },
    options,
  );
  await called.promise;
  return run;
}

/** Read `stream` to its end (events already received come first). */
async function drain(stream) {
  for await (const event of stream) void event;
}

/** `promise` rejects with CANCELLED whose details match `details`. */
async function cancelled(promise, what, details = /./) {
  await assert.rejects(within(promise, WAIT_MS, what), (err) => {
    assert.equal(err.code, Status.CANCELLED, String(err));
    assert.match(err.details, details);
    return true;
  });
}

test('closing the client cancels its session, stream, watch and unary call under way', async () => {
  const client = new SidecarClient(sidecar.address);
  try {
    const session = await stuckSession(client);
    const sleeps = { prompt: 'p', llm: script(callTurn('', ['s', 'sleep', { seconds: 300 }]), { content: 'done' }) };
    const stream = client.streamToolLoop({ ...sleeps, runId: runId('close') });
    await stream.next(); // its first event: the stream is open
    const watch = client.watchRun(session.runId);
    await watch.next();
    const unary = client.runToolLoop({ ...sleeps, runId: runId('close') });

    client.close();
    await cancelled(session.result, "the session's end");
    await cancelled(drain(stream), "the stream's end");
    await cancelled(drain(watch), "the watch's end");
    await cancelled(unary, "the unary call's end");
  } finally {
    client.close();
  }
});

test('a session with reattach ends CANCELLED when its client is closed: nothing to re-attach with', async () => {
  const client = new SidecarClient(sidecar.address);
  try {
    const session = await stuckSession(client, { reattach: true });
    client.close();
    await cancelled(session.result, "the session's end", /could not re-attach: Channel has been shut down/);
  } finally {
    client.close();
  }
});
