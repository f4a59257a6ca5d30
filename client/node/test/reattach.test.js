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
        run_id: id,
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
    assert.equal(events.at(-1).payload, 'run_completed');
    assert.equal(result.content, 'done');
    const [record] = result.tool_call_history;
    assert.equal(record.success, true);
    assert.deepEqual(record.output, { answer: 'after the drop' });
  } finally {
    client.close();
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
        run_id: runId('reattach-closed'),
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
