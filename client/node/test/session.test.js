// Session: JS tools (and a JS LLM) called back by the sidecar over the bidirectional stream.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { RunFailedError, SidecarClient, ToolError } from '../src/index.js';
import {
  SERVER_TOOLS,
  assertEventLog,
  callTurn,
  collect,
  runId,
  script,
  useSidecar,
  waitForEnd,
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

const records = (events) =>
  events.filter((e) => e.payload === 'toolCallCompleted').map((e) => e.toolCallCompleted.record);

describe('session tools', () => {
  test('sync and async JS tools are called with the inputs object; outputs are recorded', async () => {
    const calls = [];
    const run = client.session({
      prompt: 'Use both tools.',
      llm: script(
        callTurn(
          'both at once',
          ['c1', 'capital_of', { country: 'France' }],
          ['c2', 'word_count', { text: 'a b c' }],
        ),
        { content: 'Paris; 3 words.' },
      ),
      tools: {
        capital_of: ({ country }, call) => {
          calls.push(call);
          return { country, capital: country === 'France' ? 'Paris' : null };
        },
        word_count: {
          description: 'Count words.',
          inputSchema: {
            type: 'object',
            properties: { text: { type: 'string' } },
            required: ['text'],
          },
          handler: async ({ text }) => {
            await new Promise((resolve) => setTimeout(resolve, 20));
            return text.split(/\s+/).length; // not an object: recorded as {"result": 3}
          },
        },
      },
    });
    const events = await collect(run);
    assertEventLog(assert, events);
    const result = await run.result;
    assert.equal(result.content, 'Paris; 3 words.');
    assert.equal(run.runId, events[0].runId);
    assert.deepEqual(events[0].runStarted.spec.toolNames, [...SERVER_TOOLS, 'capital_of', 'word_count']);
    const [capital, count] = result.toolCallHistory;
    assert.deepEqual(capital.output, { country: 'France', capital: 'Paris' });
    assert.deepEqual(count.output, { result: 3 });
    assert.ok(capital.success && count.success);
    // Completions stream as they arrive: the sync tool answers first.
    assert.deepEqual(
      records(events).map((r) => r.callId),
      ['c1', 'c2'],
    );
    const [context] = calls;
    assert.equal(context.callId, 'c1');
    assert.equal(context.toolName, 'capital_of');
    assert.equal(context.iteration, 1);
    assert.ok(context.deadline instanceof Date && context.deadline > new Date());
    assert.ok(context.signal instanceof AbortSignal);
  });

  test('each call carries its idempotency key, RUN_ID:CALL_ID, to the tool', async () => {
    const seen = [];
    const run = client.session({
      prompt: 'p',
      llm: script(callTurn('look', ['k1', 'lookup', {}]), { content: 'ok' }),
      tools: {
        lookup: { idempotent: true, handler: (_inputs, call) => seen.push(call.idempotencyKey) && {} },
      },
    });
    await collect(run);
    await run.result;
    assert.deepEqual(seen, [`${run.runId}:k1`]);
  });

  test("the runtime's own read_file beside server tools the run names: no conflict", async () => {
    const run = client.session({
      prompt: 'p',
      toolNames: ['echo'],
      llm: script(callTurn('read', ['r1', 'read_file', { path: 'notes.txt' }]), { content: 'ok' }),
      tools: { read_file: ({ path }) => ({ mine: path }) },
    });
    const events = await collect(run);
    const result = await run.result;
    assert.deepEqual(events[0].runStarted.spec.toolNames, ['echo', 'read_file']);
    assert.deepEqual(result.toolCallHistory[0].output, { mine: 'notes.txt' });
  });

  test("no_server_tools: the run offers only the session's own tools", async () => {
    const run = client.session({
      prompt: 'p',
      noServerTools: true,
      llm: script(callTurn('read', ['r1', 'read_file', { path: 'a' }]), { content: 'ok' }),
      tools: { read_file: ({ path }) => ({ mine: path }) },
    });
    const events = await collect(run);
    const result = await run.result;
    assert.deepEqual(events[0].runStarted.spec.toolNames, ['read_file']);
    assert.equal(events[0].runStarted.spec.noServerTools, true);
    assert.deepEqual(result.toolCallHistory[0].output, { mine: 'a' });
  });

  test('a JS tool that throws gives a failed record and the loop continues', async () => {
    const run = client.session({
      prompt: 'p',
      llm: script(
        callTurn('try', ['bad', 'explode', { why: 'test' }], ['good', 'echo', { text: 'still here' }]),
        callTurn('again', ['exact', 'refuse', {}]),
        { content: 'recovered' },
      ),
      tools: [
        function explode({ why }) {
          throw new RangeError(`exploded: ${why}`);
        },
        { name: 'refuse', handler: async () => Promise.reject(new ToolError('not allowed here')) },
      ],
    });
    const events = await collect(run);
    assertEventLog(assert, events);
    const result = await run.result;
    assert.equal(result.stopReason, 'STOP_REASON_FINAL_ANSWER');
    assert.equal(result.content, 'recovered');
    assert.equal(result.iterations, 3);
    const [bad, good, exact] = result.toolCallHistory;
    assert.equal(bad.success, false);
    assert.equal(bad.error, 'RangeError: exploded: test');
    assert.equal(bad.errorKind, 'ERROR_KIND_EXCEPTION');
    assert.deepEqual(bad.output, {});
    assert.equal(good.success, true, 'the server tool in the same turn ran');
    assert.equal(exact.error, 'not allowed here', 'ToolError: the message exactly');
  });

  test('outputs: undefined, arrays, strings are wrapped; unserialisable output fails the call', async () => {
    const run = client.session({
      prompt: 'p',
      llm: script(
        callTurn('', ['u', 'nothing', {}], ['a', 'list', {}], ['s', 'text', {}], ['b', 'bigint', {}]),
        { content: 'ok' },
      ),
      tools: {
        nothing: () => {},
        list: () => [1, 'two'],
        text: async () => 'plain',
        bigint: () => ({ n: 10n }),
      },
    });
    const [nothing, list, text, bigint] = (await run.result).toolCallHistory;
    assert.deepEqual(nothing.output, { result: null });
    assert.deepEqual(list.output, { result: [1, 'two'] });
    assert.deepEqual(text.output, { result: 'plain' });
    assert.equal(bigint.success, false);
    assert.match(bigint.error, /^TypeError: .*BigInt/);
  });

  test('a JS tool past its timeout is recorded as a timeout; its signal is aborted', async () => {
    let signal;
    const run = client.session({
      prompt: 'p',
      llm: script(callTurn('', ['slow', 'slow', {}]), { content: 'gave up on it' }),
      tools: {
        slow: {
          timeout: 200,
          handler: async (_inputs, call) => {
            signal = call.signal;
            await new Promise((resolve) => call.signal.addEventListener('abort', resolve));
            // Answer well after the deadline: the sidecar must ignore the late answer.
            await new Promise((resolve) => setTimeout(resolve, 150));
            return { late: true };
          },
        },
      },
    });
    const result = await run.result;
    const [record] = result.toolCallHistory;
    assert.equal(record.success, false);
    assert.equal(record.errorKind, 'ERROR_KIND_TIMEOUT');
    assert.ok(signal.aborted);
    assert.equal(result.content, 'gave up on it');
  });

  test('parallel calls run concurrently in this process', async () => {
    let running = 0;
    let peak = 0;
    const wait = async () => {
      running += 1;
      peak = Math.max(peak, running);
      await new Promise((resolve) => setTimeout(resolve, 100));
      running -= 1;
      return {};
    };
    const calls = [1, 2, 3, 4].map((i) => [`w${i}`, 'wait', {}]);
    const result = await client.session({
      prompt: 'p',
      llm: script(callTurn('', ...calls), { content: 'ok' }),
      tools: { wait },
    }).result;
    assert.equal(result.toolCallHistory.length, 4);
    assert.equal(peak, 4, 'all four calls were in flight at once');
  });

  test('a tool name the client does not host cannot be declared twice or badly', () => {
    assert.throws(() => client.session({ prompt: 'p', tools: [() => 1] }), /tool name "" must match/);
    assert.throws(
      () =>
        client.session({
          prompt: 'p',
          tools: [
            { name: 'x', handler: () => 1 },
            { name: 'x', handler: () => 2 },
          ],
        }),
      /declared twice/,
    );
  });
});

describe('session with a JS LLM', () => {
  test('the LLM function sees the conversation, including a failed tool result', async () => {
    const requests = [];
    const run = client.session({
      prompt: 'What is 2 + 3?',
      tools: {
        add: {
          description: 'Add two numbers.',
          inputSchema: {
            type: 'object',
            properties: { a: { type: 'number' }, b: { type: 'number' } },
            required: ['a', 'b'],
          },
          handler: ({ a, b }) => ({ sum: a + b }),
        },
        broken: () => {
          throw new Error('out of order');
        },
      },
      llm: async (request) => {
        requests.push(structuredClone(request));
        if (request.iteration === 1) {
          return {
            content: 'Calling tools.',
            toolCalls: [
              { id: 't1', name: 'add', arguments: { a: 2, b: 3 } },
              { id: 't2', name: 'broken', arguments: {} },
            ],
            usage: { inputTokens: 10, outputTokens: 2 },
          };
        }
        return 'The answer is 5.'; // a string is the content of a final answer
      },
    });
    const events = await collect(run);
    assertEventLog(assert, events);
    const result = await run.result;
    assert.equal(result.content, 'The answer is 5.');
    assert.deepEqual(result.usage, { inputTokens: 10, outputTokens: 2, reportedTotalTokens: 0 });
    assert.equal(events[0].runStarted.spec.llm.profile, 'client');

    const [first, second] = requests;
    assert.equal(first.requestId, 'llm_1');
    assert.deepEqual(
      first.messages.map((m) => m.role),
      ['ROLE_USER'],
    );
    assert.equal(first.messages[0].content, 'What is 2 + 3?');
    const add = first.tools.find((t) => t.name === 'add');
    assert.deepEqual(add.inputSchema.required, ['a', 'b'], 'schemas arrive as objects');
    assert.deepEqual(
      second.messages.map((m) => m.role),
      ['ROLE_USER', 'ROLE_ASSISTANT', 'ROLE_TOOL', 'ROLE_TOOL'],
    );
    assert.deepEqual(second.messages[1].toolCalls[0].arguments, { a: 2, b: 3 });
    const [ok, failed] = second.messages.slice(2);
    assert.equal(ok.toolCallId, 't1');
    assert.deepEqual(JSON.parse(ok.content), { sum: 5 });
    assert.equal(ok.isError, false);
    assert.equal(failed.isError, true);
    assert.deepEqual(JSON.parse(failed.content), { error: 'Error: out of order' });
  });

  test('an LLM function that throws fails the run: result rejects with UNAVAILABLE', async () => {
    const run = client.session({
      prompt: 'p',
      llm: () => {
        throw new Error('provider down');
      },
    });
    const events = await collect(run);
    assert.equal(events.at(-1).payload, 'runFailed');
    await assert.rejects(run.result, (err) => {
      assert.ok(err instanceof RunFailedError);
      assert.equal(err.codeName, 'UNAVAILABLE');
      assert.match(err.details, /provider down/);
      assert.equal(err.result.stopReason, 'STOP_REASON_ERROR');
      return true;
    });
  });
});

describe('session cancellation', () => {
  test('cancel() ends the run with run_cancelled; the tool in flight is aborted', async () => {
    let toolSignal;
    let run;
    run = client.session({
      prompt: 'p',
      llm: script(callTurn('', ['hang', 'hang', {}]), { content: 'never' }),
      tools: {
        hang: (_inputs, call) => {
          toolSignal = call.signal;
          run.cancel('the user pressed stop');
          return new Promise(() => {}); // never answers
        },
      },
    });
    const events = await collect(run);
    assertEventLog(assert, events);
    const cancelled = events.at(-1).runCancelled;
    assert.equal(cancelled.reason, 'the user pressed stop');
    assert.equal(cancelled.result.stopReason, 'STOP_REASON_CANCELLED');
    const [record] = cancelled.result.toolCallHistory;
    assert.equal(record.errorKind, 'ERROR_KIND_CANCELLED');
    assert.deepEqual(await run.result, cancelled.result, 'a cancelled run resolves with its result');
    assert.ok(toolSignal.aborted, 'the session ended: the tool was told');
  });

  test('leaving the event loop early gives the run up', async () => {
    const id = runId();
    const run = client.session({
      prompt: 'p',
      runId: id,
      llm: script(callTurn('', ['s', 'sleep', { seconds: 30 }]), { content: 'never' }),
      tools: { unused: () => 0 },
    });
    for await (const event of run) {
      if (event.payload === 'toolCallStarted') break;
    }
    await assert.rejects(run.result, { codeName: 'CANCELLED' });
    const info = await waitForEnd(client, id);
    assert.equal(info.state, 'RUN_STATE_CANCELLED');
  });

  test('leaving the loop at the terminal event keeps the result', async () => {
    const run = client.session({ prompt: 'p', tools: { unused: () => 0 } });
    for await (const event of run) {
      if (event.payload === 'runCompleted') break;
    }
    assert.equal((await run.result).stopReason, 'STOP_REASON_FINAL_ANSWER');
  });

  test('an AbortSignal cancels the session call', async () => {
    const controller = new AbortController();
    const run = client.session(
      {
        prompt: 'p',
        llm: script(callTurn('', ['h', 'hold', {}]), { content: 'never' }),
        tools: {
          hold: () => {
            controller.abort();
            return new Promise(() => {});
          },
        },
      },
      { signal: controller.signal },
    );
    await assert.rejects(collect(run), { name: 'SidecarError', codeName: 'CANCELLED' });
    await assert.rejects(run.result, { codeName: 'CANCELLED' });
  });
});

describe('the wire contract, through the raw stub', () => {
  /** Answer one invocation of tool `js` with `output` text; returns the record. */
  async function answerWith(output) {
    const call = client.stub.Session();
    let record;
    call.on('data', (message) => {
      if (message.kind === 'tool_invocation') {
        call.write({ tool_result: { call_id: message.tool_invocation.call_id, output } });
      } else if (message.event.payload === 'tool_call_completed') {
        record = message.event.tool_call_completed.record;
      } else if (['run_completed', 'run_failed', 'run_cancelled'].includes(message.event.payload)) {
        call.end();
      }
    });
    call.write({
      start: {
        spec: {
          prompt: 'p',
          llm: { script: JSON.stringify([callTurn('', ['c', 'js', {}]), { content: 'ok' }]) },
        },
        tools: [{ name: 'js' }],
      },
    });
    await new Promise((resolve, reject) => {
      call.on('status', resolve);
      call.on('error', reject);
    });
    return record;
  }

  test('output that is not JSON is a failed record, not an RPC error', async () => {
    const record = await answerWith('not json');
    assert.equal(record.success, false);
    assert.equal(record.error_kind, 'ERROR_KIND_EXCEPTION');
  });

  test(
    'valid JSON that is not an object is recorded as {"result": x}',
    async () => {
      const record = await answerWith('42');
      assert.equal(record.success, true);
      assert.equal(record.output, '{"result":42}');
    },
  );
});
