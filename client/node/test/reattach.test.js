// Session re-attach: a session whose connection drops mid-call re-attaches on its own
// (`reattach: true`) through a TCP proxy the test cuts, and the run completes.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { assertEventLog, callTurn, collect, runId, script, useSidecar } from './sidecar.js';

/** A TCP proxy in front of `target` whose connections `cut()` drops at once. */
async function cuttableProxy(target) {
  const split = target.lastIndexOf(':');
  const [host, port] = [target.slice(0, split), Number(target.slice(split + 1))];
  const sockets = new Set();
  const server = net.createServer((downstream) => {
    const upstream = net.connect(port, host);
    for (const socket of [downstream, upstream]) {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => {
        sockets.delete(socket);
        downstream.destroy();
        upstream.destroy();
      });
    }
    downstream.pipe(upstream);
    upstream.pipe(downstream);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${server.address().port}`,
    cut: () => {
      for (const socket of sockets) socket.resetAndDestroy();
    },
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

let sidecar;
let proxy;

before(async () => {
  sidecar = await useSidecar();
  proxy = await cuttableProxy(sidecar.address);
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
