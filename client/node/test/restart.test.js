// A session whose client hosts its LLM, across a sidecar killed with SIGKILL and restarted on
// the same SQLite file: the client re-attaches on its own (through a proxy the test points at
// the restarted sidecar), is sent the whole conversation again, and the run completes.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { tcpProxy } from './proxy.js';
import { assertEventLog, collect, runId, startSidecar } from './sidecar.js';

test('a session hosting its LLM re-attaches to a restarted sidecar and completes', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'restart-'));
  const env = {
    CLEVERAGENTS_SIDECAR_EVENT_STORE: path.join(dir, 'runs.sqlite'),
    CLEVERAGENTS_SIDECAR_SESSION_REATTACH_S: '60',
  };
  const first = await startSidecar([], env);
  const proxy = await tcpProxy(first.address);
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
    proxy.target = null; // its port is free now: nothing may answer on it but a refusal
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
