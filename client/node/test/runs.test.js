// RunToolLoop, StreamToolLoop, GetRun, ListTools: results, JSON fields and the event log.
import assert from 'node:assert/strict';
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import {
  SERVER_TOOLS,
  assertEventLog,
  callTurn,
  collect,
  runId,
  script,
  startFailingSidecar,
  useSidecar,
} from './sidecar.js';

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

describe('runToolLoop', () => {
  test('returns the final result, JSON fields decoded', async () => {
    const result = await client.runToolLoop({
      prompt: 'Echo twice, then answer.',
      llm: script(
        callTurn(
          'Echoing.',
          ['call_1', 'echo', { text: 'one' }],
          ['call_2', 'echo', { text: 'deux ✓', extra: 1 }],
        ),
        { content: 'All done.', usage: { input_tokens: 120, output_tokens: 7 } },
      ),
    });
    assert.equal(result.content, 'All done.');
    assert.equal(result.stopReason, 'STOP_REASON_FINAL_ANSWER');
    assert.equal(result.iterations, 2);
    assert.equal(result.terminatedByLimit, false);
    assert.deepEqual(result.usage, { inputTokens: 120, outputTokens: 7, reportedTotalTokens: 0 });
    assert.match(result.runId, /^[0-9a-f]{32}$/);
    const [first, second] = result.toolCallHistory;
    assert.deepEqual(first.inputs, { text: 'one' });
    assert.deepEqual(first.output, { text: 'one' });
    assert.equal(first.success, true);
    assert.equal(first.error, null);
    assert.equal(first.errorKind, 'ERROR_KIND_UNSPECIFIED');
    assert.equal(first.callId, 'call_1');
    assert.equal(first.iteration, 1);
    assert.ok(first.startedAt instanceof Date);
    assert.equal(typeof first.durationMs, 'number');
    assert.ok(!('_error' in first), 'the synthetic oneof of `optional error` is not exposed');
    // echo's schema forbids extra keys: a failed record, and the loop went on.
    assert.equal(second.success, false);
    assert.equal(second.errorKind, 'ERROR_KIND_INVALID_ARGUMENTS');
    assert.equal(typeof second.error, 'string');
    assert.deepEqual(second.output, {});
  });

  test('a prompt string is a spec; the default script calls echo', async () => {
    const result = await client.runToolLoop('Say hello');
    assert.equal(result.stopReason, 'STOP_REASON_FINAL_ANSWER');
    assert.equal(result.toolCallHistory[0].toolName, 'echo');
    assert.deepEqual(result.toolCallHistory[0].output, { text: 'hello from the sidecar' });
  });

  test('the iteration limit ends a run with terminated_by_limit', async () => {
    const loop = callTurn('again', ['c', 'echo', { text: 'x' }]);
    const result = await client.runToolLoop({
      prompt: 'loop',
      maxIterations: 2,
      llm: script(loop, { ...loop }, { content: 'never' }),
    });
    assert.equal(result.stopReason, 'STOP_REASON_MAX_ITERATIONS');
    assert.equal(result.terminatedByLimit, true);
    assert.equal(result.iterations, 2);
    assert.equal(result.content, 'again\nagain');
  });

  test('context: sandboxRoot and resourceBindings reach the tool inputs as JSON', async () => {
    const id = runId();
    const sandbox = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'context-')));
    const result = await client.runToolLoop({
      prompt: 'p',
      runId: id,
      toolNames: ['sleep'],
      context: {
        planId: 'plan-1',
        sandboxRoot: sandbox,
        resourceBindings: { repo: { path: '/src', big: 12345 } },
      },
      llm: script(callTurn('', ['c', 'sleep', { seconds: 0 }]), { content: 'ok' }),
    });
    assert.equal(result.runId, id);
    // The runtime adds the context keys to every call's inputs, and the record shows them.
    const { inputs } = result.toolCallHistory[0];
    assert.equal(inputs.sandbox_root, sandbox);
    rmSync(sandbox, { recursive: true, force: true });
    assert.deepEqual(inputs.resource_bindings, { repo: { path: '/src', big: 12345 } });
  });

  test('a spec field the RunSpec does not have is a TypeError naming its fields', async () => {
    await assert.rejects(client.runToolLoop({ prompt: 'p', maxIteration: 3 }), {
      name: 'TypeError',
      message: /unknown run spec field 'maxIteration' \(its fields are prompt, context, maxIterations, /,
    });
    await assert.rejects(client.runToolLoop({ prompt: 'p', llm: { scripts: [] } }), TypeError);
  });

  test('a custom JSON parser sees every JSON text field', async () => {
    const seen = [];
    const json = {
      parse: (text) => {
        seen.push(text);
        return JSON.parse(text);
      },
      stringify: JSON.stringify,
    };
    const custom = new SidecarClient(sidecar.address, { json });
    try {
      await custom.runToolLoop({ prompt: 'p', llm: script(callTurn('', ['c', 'echo', { text: 't' }]), {}) });
    } finally {
      custom.close();
    }
    assert.deepEqual(seen, ['{"text":"t"}', '{"text":"t"}']);
  });
});

describe('streamToolLoop', () => {
  test('streams every event in order, sequences 1..n, ending with run_completed', async () => {
    const events = await collect(
      client.streamToolLoop({
        prompt: 'two tools then answer',
        llm: script(callTurn('first', ['a', 'echo', { text: 'A' }], ['b', 'sleep', { seconds: 0.05 }]), {
          content: 'final',
          usage: { input_tokens: 5, output_tokens: 1 },
        }),
      }),
    );
    assertEventLog(assert, events);
    const kinds = events.map((e) => e.payload);
    assert.deepEqual(kinds.slice(0, 3), ['runStarted', 'iterationStarted', 'llmResponded']);
    assert.deepEqual(kinds.slice(-3), ['iterationStarted', 'llmResponded', 'runCompleted']);
    assert.deepEqual(kinds.slice(3, 7).sort(), [
      'toolCallCompleted',
      'toolCallCompleted',
      'toolCallStarted',
      'toolCallStarted',
    ]);
    // echo finishes before sleep: completions come in the order the calls end.
    const completed = events.filter((e) => e.payload === 'toolCallCompleted');
    assert.deepEqual(
      completed.map((e) => e.toolCallCompleted.record.callId),
      ['a', 'b'],
    );

    const [started, iteration, responded] = events;
    assert.equal(started.runStarted.spec.prompt, 'two tools then answer');
    assert.equal(started.runStarted.spec.maxIterations, 25, 'the accepted spec, defaults filled in');
    assert.equal(started.runStarted.spec.llm.profile, 'scripted');
    assert.equal(started.runStarted.spec.llm.script[1].content, 'final', 'script decoded');
    assert.deepEqual(started.runStarted.spec.toolNames, SERVER_TOOLS);
    assert.equal(iteration.iterationStarted.iteration, 1);
    assert.deepEqual(responded.llmResponded.toolCalls[0], {
      id: 'a',
      name: 'echo',
      arguments: { text: 'A' },
    });
    const toolStarted = events.find((e) => e.payload === 'toolCallStarted');
    assert.deepEqual(toolStarted.toolCallStarted.inputs, { text: 'A' });

    const result = events.at(-1).runCompleted.result;
    assert.equal(result.content, 'final');
    assert.equal(result.runId, started.runId);
    assert.deepEqual(
      result.toolCallHistory.map((r) => r.callId),
      ['a', 'b'],
      'history in the order the model asked',
    );
    assert.deepEqual(
      result.toolCallHistory,
      completed.map((e) => e.toolCallCompleted.record),
    );
  });

  test('a run whose LLM fails streams run_failed (code UNAVAILABLE) and ends normally', async () => {
    const failing = await startFailingSidecar('only turn', { text: 'x' });
    const failingClient = new SidecarClient(failing.address);
    let events;
    try {
      events = await collect(failingClient.streamToolLoop({ prompt: 'p' }));
    } finally {
      failingClient.close();
      await failing.stop();
    }
    assertEventLog(assert, events);
    const failed = events.at(-1).runFailed;
    assert.equal(failed.code, 14);
    assert.match(failed.message, /overloaded/);
    assert.equal(failed.result.stopReason, 'STOP_REASON_ERROR');
    assert.equal(failed.result.toolCallHistory.length, 1);
  });
});

describe('getRun and listTools', () => {
  test('getRun reports a finished run with its result and last sequence', async () => {
    const id = runId();
    const events = await collect(client.streamToolLoop({ prompt: 'p', runId: id }));
    const info = await client.getRun(id);
    assert.equal(info.runId, id);
    assert.equal(info.state, 'RUN_STATE_COMPLETED');
    assert.equal(info.lastSequence, events.length);
    assert.deepEqual(info.result, events.at(-1).runCompleted.result);
  });

  test('listTools returns the server tools with their schemas as objects', async () => {
    const tools = await client.listTools();
    assert.deepEqual(
      tools.map((t) => t.name),
      SERVER_TOOLS,
    );
    const echo = tools[0];
    assert.equal(echo.inputSchema.type, 'object');
    assert.deepEqual(echo.inputSchema.required, ['text']);
    assert.equal(echo.timeout, null);
  });
});
