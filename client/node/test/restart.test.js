// A session whose client hosts its LLM, across a sidecar killed with SIGKILL and restarted on
// the same SQLite file: the client re-attaches on its own (through a proxy the test points at
// the restarted sidecar), is sent the whole conversation again, and the run completes.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { assertEventLog, collect, runId, startSidecar } from './sidecar.js';

/** A TCP proxy that connects each new connection to `proxy.target`; `cut()` drops them all. */
async function switchableProxy(target) {
  const sockets = new Set();
  const proxy = { target, address: '', cut: () => {}, close: async () => {} };
  const server = net.createServer((downstream) => {
    const split = proxy.target.lastIndexOf(':');
    const upstream = net.connect(Number(proxy.target.slice(split + 1)), proxy.target.slice(0, split));
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
  proxy.address = `127.0.0.1:${server.address().port}`;
  proxy.cut = () => {
    for (const socket of sockets) socket.resetAndDestroy();
  };
  proxy.close = () => {
    for (const socket of sockets) socket.destroy();
    return new Promise((resolve) => server.close(resolve));
  };
  return proxy;
}

test('a session hosting its LLM re-attaches to a restarted sidecar and completes', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'restart-'));
  const env = {
    CLEVERAGENTS_SIDECAR_EVENT_STORE: path.join(dir, 'runs.sqlite'),
    CLEVERAGENTS_SIDECAR_SESSION_REATTACH_S: '60',
  };
  const first = await startSidecar([], env);
  const proxy = await switchableProxy(first.address);
  const client = new SidecarClient(proxy.address);
  let second = null;
  let running;
  const isRunning = new Promise((resolve) => (running = resolve));
  let release;
  const released = new Promise((resolve) => (release = resolve));
  const sent = [];
  try {
    const run = client.session(
      {
        prompt: 'p',
        runId: runId('restart'),
        llm: (request) => {
          sent.push(request.messages.length);
          if (request.iteration === 1) {
            return { content: '', toolCalls: [{ id: 'r1', name: 'remote', arguments: {} }] };
          }
          return { content: 'done' };
        },
        tools: {
          remote: async () => {
            running();
            await released; // its answer comes too late: the call was interrupted
            return { n: 1 };
          },
        },
      },
      { reattach: true },
    );
    const collecting = collect(run);
    await isRunning;
    await first.kill();
    proxy.cut();
    second = await startSidecar([], env);
    proxy.target = second.address;
    release();
    const events = await collecting;
    const result = await run.result;

    assertEventLog(assert, events);
    assert.ok(events.some((e) => e.payload === 'runResumed'), 'the run resumed');
    assert.equal(result.content, 'done');
    const [record] = result.toolCallHistory;
    assert.equal(record.success, false);
    assert.match(record.error, /interrupted by a sidecar restart/);
    // The restarted sidecar sent the whole conversation again; the client took it whole.
    assert.deepEqual(sent, [1, 3]);
  } finally {
    client.close();
    await proxy.close();
    await first.stop();
    await second?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
