// Session re-attach: a session whose connection drops mid-call re-attaches on its own
// (`reattach: true`) through a TCP proxy the test cuts, and the run completes.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { SidecarClient, Status } from '../src/index.js';
import { tcpProxy } from './proxy.js';
import { WAIT_MS, assertEventLog, callTurn, collect, runId, script, signalled, useSidecar, within } from './sidecar.js';

let sidecar;
let proxy;

before(async () => {
  sidecar = await useSidecar();
  proxy = await tcpProxy(sidecar.address);
});

after(async () => {
  await proxy?.close();
  await sidecar?.stop();
});

test('a session re-attaches after its connection drops mid-call, the call answered once', async () => {
  const client = new SidecarClient(proxy.address);
  const id = runId('reattach');
  let calls = 0;
  try {
    const run = client.session(
      {
        prompt: 'p',
        runId: id,
        llm: script(callTurn('', ['r1', 'remote', {}]), { content: 'done' }),
        tools: {
          remote: () => {
            calls += 1;
            proxy.cut(); // the answer goes out on a dead stream: it is sent again on the next
            return { answer: 'after the drop' };
          },
        },
      },
      { reattach: true },
    );
    const events = await collect(run);
    const result = await run.result;

    assert.equal(calls, 1, 'the tool ran once');
    assertEventLog(assert, events);
    assert.equal(events.at(-1).payload, 'runCompleted');
    assert.equal(result.content, 'done');
    const [record] = result.toolCallHistory;
    assert.equal(record.success, true);
    assert.deepEqual(record.output, { answer: 'after the drop' });
  } finally {
    client.close();
  }
});

/** A client's re-attach window (ms), shorter than the session below lasts. */
const REATTACH_MS = 2000;

/**
 * Resolve once `ms` have passed on the monotonic clock: a tool's long work (polled inside the
 * tool, never to synchronise the test).
 */
async function outlive(ms) {
  const began = performance.now();
  while (performance.now() - began <= ms) await new Promise((resolve) => setTimeout(resolve, 50));
}

test('a session older than its re-attach timeout re-attaches, the window counting from the break', async () => {
  const own = await tcpProxy(sidecar.address);
  const client = new SidecarClient(own.address);
  let calls = 0;
  try {
    const run = client.session(
      {
        prompt: 'p',
        runId: runId('reattach-old'),
        llm: script(callTurn('', ['r1', 'remote', {}]), { content: 'done' }),
        tools: {
          remote: async () => {
            calls += 1;
            await outlive(REATTACH_MS); // the session is older than its timeout now
            own.cut(); // the answer goes out on a dead stream: it is sent again on the next
            return { answer: 'after the drop' };
          },
        },
      },
      { reattach: true, reattachTimeoutMs: REATTACH_MS },
    );
    const events = await collect(run);
    const result = await run.result;

    assert.equal(calls, 1, 'the tool ran once');
    assertEventLog(assert, events);
    assert.equal(events.at(-1).payload, 'runCompleted');
    const [record] = result.toolCallHistory;
    assert.deepEqual(record.output, { answer: 'after the drop' });
  } finally {
    client.close();
    await own.close();
  }
});

test('a session re-attaching when its client is closed ends CANCELLED, and nothing runs on', async () => {
  const own = await tcpProxy(sidecar.address);
  const client = new SidecarClient(own.address);
  const called = signalled();
  try {
    const run = client.session(
      {
        prompt: 'p',
        runId: runId('reattach-closed'),
        llm: script(callTurn('', ['r1', 'remote', {}]), { content: 'done' }),
        tools: {
          remote: () => {
            called.resolve();
            return new Promise(() => {}); // no answer: the session is mid-call when cut off
          },
        },
      },
      { reattach: true },
    );
    await called.promise;
    await own.close(); // its connection dropped and nothing to re-attach to: it keeps trying
    client.close();
    await assert.rejects(within(run.result, WAIT_MS, "the session's end"), (err) => {
      assert.equal(err.code, Status.CANCELLED);
      assert.match(err.details, /could not re-attach: Channel has been shut down/);
      return true;
    });
  } finally {
    client.close();
  }
});
