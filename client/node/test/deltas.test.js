// Opt-in LLM deltas: `llm_delta` events (sequence 0) on streamToolLoop, watchRun and session.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { WAIT_MS, callTurn, collect, runId, script, useSidecar } from './sidecar.js';

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

const LONG = Array.from({ length: 30 }, (_, i) => `w${i}`).join(' ');

/** Each call's deltas: sequence 0, numbered without gaps, spelling the answer exactly. A call
 * with none is one made before the stream joined while no stream read deltas (a scripted
 * answer is then not split), which its llm_responded alone carries. */
function assertSpelled(events) {
  let text = '';
  let next = 0;
  const args = new Map();
  const deltas = [];
  for (const event of events) {
    if (event.payload === 'llmDelta') {
      const delta = event.llmDelta;
      assert.equal(event.sequence, 0);
      assert.equal(delta.index, next);
      next = delta.index + delta.count;
      deltas.push(delta);
      if (delta.toolCallIndex === null) text += delta.text;
      else args.set(delta.toolCallIndex, (args.get(delta.toolCallIndex) ?? '') + delta.arguments);
    } else if (event.payload === 'llmResponded') {
      const responded = event.llmResponded;
      if (next > 0) {
        assert.equal(text, responded.content);
        responded.toolCalls.forEach((c, i) =>
          assert.deepEqual(JSON.parse(args.get(i)), c.arguments),
        );
      }
      text = '';
      next = 0;
      args.clear();
    }
  }
  return deltas;
}

test('streamToolLoop yields llm_delta events only with streamDeltas', async () => {
  const llm = script(callTurn('echo it', ['c1', 'echo', { text: 'hi' }]), { content: LONG });
  const plain = await collect(client.streamToolLoop({ prompt: 'go', llm }));
  const live = await collect(client.streamToolLoop({ prompt: 'go', llm }, { streamDeltas: true }));

  assert.ok(!plain.some((e) => e.payload === 'llmDelta'));
  const deltas = assertSpelled(live);
  assert.ok(deltas.some((d) => d.toolName === 'echo' && d.toolCallIndex === 0));
  assert.deepEqual(
    live.filter((e) => e.payload !== 'llmDelta').map((e) => e.payload),
    plain.map((e) => e.payload),
  );
});

test('watchRun with streamDeltas follows a run and its answers as they stream', async () => {
  const id = runId('deltas');
  const llm = script(callTurn('napping', ['n1', 'sleep', { seconds: 0.3 }]), { content: LONG });
  const starter = client.streamToolLoop({ prompt: 'go', llm, runId: id, detach: true });
  for await (const event of starter) if (event.payload === 'runStarted') break;
  const watched = await collect(client.watchRun(id, { streamDeltas: true }));

  const deltas = assertSpelled(watched);
  assert.ok(deltas.length > 0);
  assert.equal(watched.at(-1).payload, 'runCompleted');
  assert.ok(deltas.map((d) => d.text).join('').endsWith(LONG)); // the last answer, at least
});

test('a session with streamDeltas gets its answers as deltas', async () => {
  const events = await collect(
    client.session({ prompt: 'go', llm: script({ content: LONG }) }, { streamDeltas: true }),
  );
  assert.equal(assertSpelled(events).map((d) => d.text).join(''), LONG);
});

test('a client-hosted LLM that is an async generator streams its answer to a watcher with streamDeltas', async () => {
  const id = runId('js-llm');
  let sawFirst;
  const firstSeen = new Promise((resolve) => {
    sawFirst = resolve;
  });
  const watch = async () => {
    const events = [];
    for await (const event of client.watchRun(id, { streamDeltas: true })) {
      if (event.payload === 'llmDelta') sawFirst();
      events.push(event);
    }
    return events;
  };
  let watching = null;
  async function* llm(request) {
    if (request.iteration === 1) {
      watching = watch();
      yield 'Let me ';
      // The rest only once the watcher has the first piece: it sees the answer as it streams.
      await Promise.race([firstSeen, new Promise((_, no) => setTimeout(no, WAIT_MS, new Error('unseen')).unref())]);
      yield { text: 'shout.' };
      yield { toolCallIndex: 0, toolCallId: 's1', toolName: 'shout', arguments: '{"text":' };
      yield { toolCallIndex: 0, arguments: ' "hi"}' };
      return; // the answer the pieces spell
    }
    yield 'HI';
    yield ' back';
    return 'HI back';
  }
  const run = client.session(
    { prompt: 'go', runId: id, llm, tools: { shout: ({ text }) => ({ loud: text.toUpperCase() }) } },
    { streamDeltas: true },
  );
  const own = await collect(run);
  const watched = await watching;

  const result = await run.result;
  assert.equal(result.content, 'HI back');
  assert.deepEqual(result.toolCallHistory[0].inputs, { text: 'hi' });
  for (const events of [own, watched]) {
    const deltas = assertSpelled(events);
    assert.equal(deltas.filter((d) => d.toolCallIndex === null).map((d) => d.text).join(''), 'Let me shout.HI back');
    assert.ok(deltas.some((d) => d.toolCallIndex === 0 && d.toolName === 'shout'));
  }
  assert.ok(watched.filter((e) => e.payload === 'llmDelta').length >= 2, 'the watcher got live pieces too');
  assert.equal(watched.at(-1).payload, 'runCompleted');
});

test('a streaming LLM that yields what is not a piece fails its run, saying which', async () => {
  async function* llm() {
    yield 'fine so far';
    yield 42;
  }
  const run = client.session({ prompt: 'go', llm }, { streamDeltas: true });
  const events = await collect(run);

  assert.equal(events.at(-1).payload, 'runFailed');
  assert.match(events.at(-1).runFailed.message, /piece 1 is number, not a string or an llmDelta object/);
  await assert.rejects(run.result, /piece 1 is number/);
});
