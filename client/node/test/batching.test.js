// Batched events: the client asks for them on StreamToolLoop and Session (FollowRun always
// batches), and unpacks them so that iterating still gives one event per step, each once, in
// sequence order.
//
// A grpc-js interceptor records what goes over the wire: the requests the client sends, and
// each response message as the sidecar sent it (so batches can be counted).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import grpc from '@grpc/grpc-js';

import { SidecarClient } from '../src/index.js';
import {
  assertEventLog,
  callTurn,
  collect,
  runId,
  script,
  startSidecar,
  useSidecar,
  waitForEnd,
} from './sidecar.js';

let sidecar;
let client;
let wire;

before(async () => {
  sidecar = await useSidecar();
  wire = recorder();
  client = new SidecarClient(sidecar.address, { channelOptions: { interceptors: [wire.interceptor] } });
});

after(async () => {
  client?.close();
  await sidecar?.stop();
});

/**
 * An interceptor that records every call: `{method, requests, responses}`, the messages as
 * the client sent them and as the sidecar sent them. `rewrite` may replace a request.
 */
function recorder(rewrite = (message) => message) {
  const calls = [];
  const interceptor = (options, nextCall) => {
    const record = { method: options.method_definition.path.split('/').pop(), requests: [], responses: [] };
    calls.push(record);
    return new grpc.InterceptingCall(nextCall(options), {
      start(metadata, _listener, next) {
        next(metadata, {
          onReceiveMessage(message, forward) {
            record.responses.push(message);
            forward(message);
          },
        });
      },
      sendMessage(message, next) {
        const sent = rewrite(message);
        record.requests.push(sent);
        next(sent);
      },
    });
  };
  return { interceptor, calls, of: (method) => calls.filter((c) => c.method === method) };
}

/** How many events a response message carries (a batch in `events`, or one in `event`). */
const carried = (response) => response.events.length + (response.event ? 1 : 0);

/** The sequences of the events the responses carry, in wire order. */
const wireSequences = (responses) =>
  responses.flatMap((r) => [...r.events, ...(r.event ? [r.event] : [])]).map((e) => Number(e.sequence));

/** A script of `n` echo turns then a final answer: 4n + 4 events, logged as fast as it can. */
function echoScript(n) {
  const turns = [];
  for (let i = 0; i < n; i += 1) turns.push(callTurn('', [`e${i}`, 'echo', { text: `t${i}` }]));
  turns.push({ content: 'done' });
  return script(...turns);
}

/**
 * A short sleep (time to attach a watcher), then `n` echo turns: 4n + 8 events. `text` is what
 * each turn echoes (it appears four times in the turn's events).
 */
function burstScript(n, text = 'x') {
  const turns = [callTurn('wait', ['nap', 'sleep', { seconds: 0.2 }])];
  for (let i = 0; i < n; i += 1) turns.push(callTurn('', [`e${i}`, 'echo', { text }]));
  turns.push({ content: 'done' });
  return script(...turns);
}

/** Every sequence 1..n exactly once, in order. */
function assertOneToN(events, n) {
  assert.equal(events.length, n);
  assert.deepEqual(
    events.map((e) => e.sequence),
    Array.from({ length: n }, (_, i) => i + 1),
  );
}

describe('streamToolLoop with batched events', () => {
  test('a run of many fast iterations: every event once, 1..N, from fewer messages', async () => {
    const n = 200;
    const already = wire.of('StreamToolLoop').length;
    const events = await collect(
      client.streamToolLoop({ prompt: 'p', maxIterations: n + 5, llm: echoScript(n) }),
    );
    const total = 4 * n + 4;
    assertEventLog(assert, events);
    assertOneToN(events, total);
    assert.equal(events.at(-1).runCompleted.result.iterations, n + 1);

    const calls = wire.of('StreamToolLoop').slice(already);
    assert.equal(calls.length, 1);
    const [{ requests, responses }] = calls;
    assert.equal(requests[0].batch_events, true, 'the client asks for batches');
    for (const response of responses) {
      assert.ok(response.events.length === 0 || response.event === null, 'event or events, not both');
      assert.ok(carried(response) > 0, 'no empty message');
    }
    assert.deepEqual(wireSequences(responses), events.map((e) => e.sequence), 'what was sent, as sent');
    assert.ok(
      responses.length < total,
      `the sidecar batched: ${responses.length} messages for ${total} events`,
    );
    assert.ok(responses.some((r) => r.events.length > 1), 'a message held several events');
  });

  test('a sidecar that does not batch (event only) streams the same way', async () => {
    // What an older sidecar does: it ignores batch_events and fills `event` alone.
    const plain = recorder((message) => ({ ...message, batch_events: false }));
    const unbatched = new SidecarClient(sidecar.address, {
      channelOptions: { interceptors: [plain.interceptor] },
    });
    try {
      const n = 50;
      const events = await collect(
        unbatched.streamToolLoop({ prompt: 'p', maxIterations: n + 5, llm: echoScript(n) }),
      );
      assertEventLog(assert, events);
      assertOneToN(events, 4 * n + 4);
      const [{ requests, responses }] = plain.of('StreamToolLoop');
      assert.equal(requests[0].batch_events, false);
      assert.equal(responses.length, 4 * n + 4, 'one message per event');
      assert.ok(responses.every((r) => r.events.length === 0 && r.event !== null));

      const id = events[0].runId;
      assert.deepEqual(await collect(unbatched.watchRun(id)), events);
    } finally {
      unbatched.close();
    }
  });
});

describe('session with batched events', () => {
  test('a JS tool over many iterations: every event in order, every invocation answered', async () => {
    const n = 30;
    const already = wire.of('Session').length;
    const called = [];
    const turns = [];
    for (let i = 0; i < n; i += 1) turns.push(callTurn(`step ${i}`, [`c${i}`, 'add', { a: i, b: 1000 }]));
    turns.push({ content: 'done' });
    const run = client.session({
      prompt: 'Add, many times.',
      maxIterations: n + 5,
      llm: script(...turns),
      tools: {
        add: async ({ a, b }, call) => {
          called.push(call.callId);
          if (a % 3 === 0) await new Promise((resolve) => setTimeout(resolve, 5));
          return { sum: a + b };
        },
      },
    });
    const events = await collect(run);
    const total = 4 * n + 4;
    assertEventLog(assert, events);
    assertOneToN(events, total);

    const ids = Array.from({ length: n }, (_, i) => `c${i}`);
    assert.deepEqual(called, ids, 'each invocation ran once, in order');
    const result = await run.result;
    assert.equal(result.content, 'done');
    assert.deepEqual(
      result.toolCallHistory.map((r) => [r.callId, r.success, r.output.sum]),
      ids.map((id, i) => [id, true, i + 1000]),
      'every invocation was answered',
    );
    // Each iteration's events in the order they were logged.
    for (let i = 0; i < n; i += 1) {
      const mine = events.filter(
        (e) =>
          (e.payload === 'iterationStarted' && e.iterationStarted.iteration === i + 1) ||
          (e.payload === 'llmResponded' && e.llmResponded.iteration === i + 1) ||
          (e.payload === 'toolCallStarted' && e.toolCallStarted.callId === `c${i}`) ||
          (e.payload === 'toolCallCompleted' && e.toolCallCompleted.record.callId === `c${i}`),
      );
      assert.deepEqual(
        mine.map((e) => e.payload),
        ['iterationStarted', 'llmResponded', 'toolCallStarted', 'toolCallCompleted'],
      );
    }

    const calls = wire.of('Session').slice(already);
    assert.equal(calls.length, 1);
    const [{ requests, responses }] = calls;
    assert.equal(requests[0].start.batch_events, true, 'the client asks for batches');
    assert.deepEqual(wireSequences(responses), events.map((e) => e.sequence));
    const invocations = responses.filter((r) => r.kind === 'tool_invocation');
    assert.equal(invocations.length, n);
    assert.equal(requests.filter((r) => r.tool_result).length, n, 'one answer per invocation');
    // On the wire, each invocation comes after its tool_call_started (in the same message, when
    // batched with it): the events of a message precede its invocation.
    const seen = new Set();
    for (const response of responses) {
      for (const event of response.events) {
        if (event.payload === 'tool_call_started') seen.add(event.tool_call_started.call_id);
      }
      if (response.kind === 'event' && response.event.payload === 'tool_call_started') {
        seen.add(response.event.tool_call_started.call_id);
      }
      if (response.kind === 'tool_invocation') {
        assert.ok(seen.has(response.tool_invocation.call_id), 'its event came first');
      }
    }
    assert.ok(
      responses.some((r) => r.kind === 'tool_invocation' && r.events.length > 0),
      'an invocation shared a message with the events before it',
    );
    assert.ok(
      responses.length < total + n,
      `the sidecar batched: ${responses.length} messages for ${total} events and ${n} invocations`,
    );
  });

  test('a JS LLM and a JS tool: the batches before each LLM call are unpacked too', async () => {
    const n = 10;
    const already = wire.of('Session').length;
    const llmCalls = [];
    const run = client.session({
      prompt: 'count',
      maxIterations: n + 5,
      tools: { inc: ({ value }) => ({ value: value + 1 }) },
      llm: (request) => {
        llmCalls.push(request.iteration);
        const last = request.messages.at(-1);
        const value = last.role === 'ROLE_TOOL' ? JSON.parse(last.content).value : 0;
        if (request.iteration > n) return `reached ${value}`;
        return { toolCalls: [{ id: `i${request.iteration}`, name: 'inc', arguments: { value } }] };
      },
    });
    const events = await collect(run);
    assertEventLog(assert, events);
    assertOneToN(events, 4 * n + 4);
    assert.deepEqual(
      llmCalls,
      Array.from({ length: n + 1 }, (_, i) => i + 1),
    );
    assert.equal((await run.result).content, `reached ${n}`);
    const [{ responses }] = wire.of('Session').slice(already);
    assert.deepEqual(wireSequences(responses), events.map((e) => e.sequence));
    assert.equal(responses.filter((r) => r.kind === 'llm_invocation').length, n + 1);
  });
});

describe('watchRun (FollowRun, batched and acknowledged)', () => {
  test('a watcher sees the whole log in order, live and replayed', async () => {
    const n = 300;
    const id = runId();
    const start = client.streamToolLoop({
      prompt: 'p',
      runId: id,
      detach: true,
      maxIterations: n + 5,
      llm: burstScript(n),
    });
    for await (const event of start) if (event.payload === 'toolCallStarted') break;
    const already = wire.of('FollowRun').length;
    const total = 4 * n + 8;

    const live = await collect(client.watchRun(id)); // attached during the nap
    assertEventLog(assert, live);
    assertOneToN(live, total);

    const replay = await collect(client.watchRun(id));
    assert.deepEqual(replay, live);
    const tail = await collect(client.watchRun(id, { afterSequence: 700 }));
    assert.deepEqual(tail, live.slice(700));

    const calls = wire.of('FollowRun').slice(already);
    assert.equal(calls.length, 3, 'no reconnection');
    for (const { requests } of calls) assert.ok(requests[0].start, 'each call opens with its start');
    assert.deepEqual(wireSequences(calls[0].responses), live.map((e) => e.sequence));
    assert.deepEqual(wireSequences(calls[2].responses), tail.map((e) => e.sequence));
    const replayed = calls[1].responses;
    assert.ok(replayed.length < total, `the replay was batched: ${replayed.length} messages`);
    assert.ok(calls[0].responses.length < total, `so was the live log: ${calls[0].responses.length}`);
  });

  test('a log larger than the window is followed in one call, acknowledged as asked', async () => {
    const n = 150;
    const id = runId();
    // Some 5 MB of events (8 KiB echoed four times a turn): several of the sidecar's 1 MiB windows.
    await client.runToolLoop({ prompt: 'p', runId: id, maxIterations: n + 5, llm: burstScript(n, 'x'.repeat(8192)) });
    const already = wire.of('FollowRun').length;
    const events = await collect(client.watchRun(id));
    assertOneToN(events, 4 * n + 8);

    const calls = wire.of('FollowRun').slice(already);
    assert.equal(calls.length, 1, 'no reconnection: the acks kept the window open');
    const [{ requests, responses }] = calls;
    // What each request for an ack covers: the newest event received (a request with no
    // events of its own comes when the sidecar waits for room).
    const asked = [];
    let newest = 0;
    for (const r of responses) {
      if (r.events.length) newest = Number(r.events.at(-1).sequence);
      if (r.ack_requested) asked.push(newest);
    }
    const acks = requests.slice(1).map((r) => Number(r.ack.sequence));
    assert.ok(asked.length >= 4, `the sidecar asked for acks: ${asked.length}`);
    assert.deepEqual(acks, asked, 'each ack answers one request, with the newest event then');
  });

  describe('with a sidecar whose watchers may fall only 64 events behind', () => {
    let small;
    let smallClient;
    let smallWire;

    before(async () => {
      small = await startSidecar(['--watcher-queue-size', '64']);
      smallWire = recorder();
      smallClient = new SidecarClient(small.address, {
        channelOptions: { interceptors: [smallWire.interceptor] },
      });
    });

    after(async () => {
      smallClient?.close();
      await small?.stop();
    });

    test('dropped in the middle of a batch, it resumes after the last event it yielded', async () => {
      const n = 300;
      const id = runId();
      const start = smallClient.streamToolLoop({
        prompt: 'p',
        runId: id,
        detach: true,
        maxIterations: n + 5,
        // Some 10 MB of events: more than flow control lets through to a reader that has
        // stopped, so the sidecar falls behind writing them, and drops this watcher.
        llm: burstScript(n, 'x'.repeat(8192)),
      });
      for await (const event of start) if (event.payload === 'toolCallStarted') break;

      const events = [];
      const lastBeforeCall = []; // per FollowRun call: the last sequence yielded before it opened
      let stalled = null;
      for await (const event of smallClient.watchRun(id)) {
        const calls = smallWire.of('FollowRun');
        while (lastBeforeCall.length < calls.length) lastBeforeCall.push(events.at(-1)?.sequence ?? 0);
        events.push(event);
        if (stalled === null) {
          // Stall the first time this event is not the last of its message: the rest of the
          // batch is held by the client while the sidecar, meanwhile, drops the watcher.
          const holds = (r) => r.events.some((e) => Number(e.sequence) === event.sequence);
          const batch = calls.at(-1).responses.find(holds);
          if (batch && Number(batch.events.at(-1).sequence) !== event.sequence) {
            stalled = event.sequence;
            await waitForEnd(smallClient, id);
          }
        }
      }
      assert.ok(stalled !== null, 'the watcher stalled inside a batch');
      assertEventLog(assert, events);
      assertOneToN(events, 4 * n + 8);

      const calls = smallWire.of('FollowRun');
      assert.ok(calls.length >= 2, 'the watcher was dropped and reconnected');
      assert.deepEqual(
        calls.map((c) => Number(c.requests[0].start.after_sequence)),
        lastBeforeCall,
        'each reconnection resumes after the last event yielded',
      );
    });
  });
});
