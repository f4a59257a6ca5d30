// Session re-attach: a session whose connection drops mid-call re-attaches on its own
// (`reattach: true`) through a TCP proxy the test cuts, and the run completes.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { tcpProxy } from './proxy.js';
import { assertEventLog, callTurn, collect, runId, script, useSidecar } from './sidecar.js';

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
