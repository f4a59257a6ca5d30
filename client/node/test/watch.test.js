// WatchRun (resume, several watchers, reconnection after a drop) and cancelling runs.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { SidecarClient, Status } from '../src/index.js';
import {
  assertEventLog,
  callTurn,
  collect,
  runId,
  script,
  startSidecar,
  until,
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

/** A script: a short sleep (time to attach watchers), an echo, then a final answer. */
const sleepyScript = (seconds = 0.3) =>
  script(
    callTurn('waiting', ['nap', 'sleep', { seconds }]),
    callTurn('echoing', ['say', 'echo', { text: 'after the nap' }]),
    { content: 'done' },
  );

/** Echoed by the drop tests: big events, so that a stalled watcher really falls behind. */
const BIG_TEXT = 'x'.repeat(8192);

/** A script of `n` echo turns after a short sleep: 4n + 8 events, logged in a burst. */
function burstScript(n, text = 'x') {
  const turns = [callTurn('wait', ['nap', 'sleep', { seconds: 0.2 }])];
  for (let i = 0; i < n; i += 1) turns.push(callTurn('', [`e${i}`, 'echo', { text }]));
  turns.push({ content: 'done' });
  return script(...turns);
}

describe('watchRun', () => {
  test('resumes a detached run after the last event seen, then follows it live', async () => {
    const id = runId();
    const stream = client.streamToolLoop({ prompt: 'p', runId: id, detach: true, llm: sleepyScript() });
    const seen = [];
    for await (const event of stream) {
      seen.push(event);
      if (seen.length === 3) break; // the starting stream goes away; the run is detached
    }
    const rest = await collect(client.watchRun(id, { afterSequence: 3 }));
    assertEventLog(assert, rest, { from: 4 });
    assert.equal(rest.at(-1).payload, 'runCompleted');
    assertEventLog(assert, [...seen, ...rest]);

    // The whole log replays from 0 once the run is over, identical to what was streamed.
    const replay = await collect(client.watchRun(id));
    assert.deepEqual(replay, [...seen, ...rest]);
  });

  test('several watchers of one live run see the same log', async () => {
    const id = runId();
    const stream = client.streamToolLoop({ prompt: 'p', runId: id, llm: sleepyScript() });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next(); // runStarted: the run exists
    const watchers = await Promise.all([
      collect(client.watchRun(id)),
      collect(client.watchRun(id, { afterSequence: 1 })),
    ]);
    const own = [];
    for (let next = await iterator.next(); !next.done; next = await iterator.next()) own.push(next.value);
    assertEventLog(assert, watchers[0]);
    assert.deepEqual(watchers[1], watchers[0].slice(1));
    assert.deepEqual(own, watchers[0].slice(1));
  });

  describe('with a sidecar whose watchers may fall only 64 events behind', () => {
    let small;
    let client;

    before(async () => {
      small = await startSidecar(['--watcher-queue-size', '64']);
      client = new SidecarClient(small.address);
    });

    after(async () => {
      client?.close();
      await small?.stop();
    });

    test('a watcher dropped for falling behind reconnects by itself, with no gap', async () => {
      const id = runId();
      const start = client.streamToolLoop({
        prompt: 'p',
        runId: id,
        detach: true,
        maxIterations: 400,
        // Some 10 MB of events: more than flow control and batching let through to a reader
        // that has stopped, so the sidecar falls behind writing them and drops the watcher.
        llm: burstScript(300, BIG_TEXT),
      });
      for await (const event of start) if (event.payload === 'toolCallStarted') break;
      const events = await collect(client.watchRun(id)); // attached during the nap
      assertEventLog(assert, events);
      assert.equal(events.length, 4 * 300 + 8);
    });

    test('with resume: false the drop is an error carrying the sequence to resume after', async () => {
      const id = runId();
      const start = client.streamToolLoop({
        prompt: 'p',
        runId: id,
        detach: true,
        maxIterations: 400,
        llm: burstScript(300, BIG_TEXT),
      });
      for await (const event of start) if (event.payload === 'toolCallStarted') break;
      const watcher = client.watchRun(id, { resume: false });
      const seen = [];
      const error = await (async () => {
        try {
          for await (const event of watcher) {
            seen.push(event);
            // A slow consumer: stop reading until the run has ended.
            if (seen.length === 1) await waitForEnd(client, id);
          }
        } catch (err) {
          return err;
        }
        return null;
      })();
      assert.ok(error, 'the watcher was dropped');
      assert.equal(error.code, Status.RESOURCE_EXHAUSTED);
      assert.equal(error.afterSequence, seen.at(-1).sequence);
      const rest = await collect(client.watchRun(id, { afterSequence: error.afterSequence }));
      assertEventLog(assert, [...seen, ...rest]);
    });
  });

  test(
    'a watcher that keeps up is not dropped during a burst of events',
    async () => {
      const id = runId();
      const start = client.streamToolLoop({
        prompt: 'p',
        runId: id,
        detach: true,
        maxIterations: 400,
        llm: burstScript(300),
      });
      for await (const event of start) if (event.payload === 'toolCallStarted') break;
      const events = await collect(client.watchRun(id, { resume: false }));
      assert.equal(events.length, 4 * 300 + 8);
    },
  );
});

describe('cancelling runs', () => {
  test('cancelRun ends a streaming run with run_cancelled and a cancelled record', async () => {
    const events = [];
    for await (const event of client.streamToolLoop({ prompt: 'p', llm: sleepyScript(30) })) {
      events.push(event);
      if (event.payload === 'toolCallStarted') {
        assert.equal(await client.cancelRun(event.runId, 'enough'), 'RUN_STATE_CANCELLED');
      }
    }
    assertEventLog(assert, events);
    const { reason, result } = events.at(-1).runCancelled;
    assert.equal(reason, 'enough');
    assert.equal(result.stopReason, 'STOP_REASON_CANCELLED');
    assert.equal(result.toolCallHistory[0].errorKind, 'ERROR_KIND_CANCELLED');
    assert.equal(result.content, 'waiting');
    // Cancelling an ended run changes nothing.
    assert.equal(await client.cancelRun(events[0].runId), 'RUN_STATE_CANCELLED');
  });

  test('cancelRun makes runToolLoop resolve with the partial result', async () => {
    const id = runId();
    const pending = client.runToolLoop({ prompt: 'p', runId: id, llm: sleepyScript(30) });
    await until(async () => (await client.getRun(id).catch(() => null))?.lastSequence >= 4);
    await client.cancelRun(id);
    const result = await pending;
    assert.equal(result.stopReason, 'STOP_REASON_CANCELLED');
  });

  test('aborting a stream (AbortSignal or cancel()) cancels its run', async () => {
    for (const how of ['signal', 'cancel']) {
      const id = runId();
      const controller = new AbortController();
      const stream = client.streamToolLoop(
        { prompt: 'p', runId: id, llm: sleepyScript(30) },
        { signal: controller.signal },
      );
      await assert.rejects(
        (async () => {
          for await (const event of stream) {
            if (event.payload === 'toolCallStarted') {
              if (how === 'signal') controller.abort();
              else stream.cancel();
            }
          }
        })(),
        { codeName: 'CANCELLED' },
      );
      const info = await waitForEnd(client, id);
      assert.equal(info.state, 'RUN_STATE_CANCELLED', how);
      assert.equal(info.result.stopReason, 'STOP_REASON_CANCELLED');
    }
  });

  test("the call's deadline is the run's budget: DEADLINE_EXCEEDED, then the run is over", async () => {
    const id = runId();
    // The run's timer is set to the call's deadline, so the two race: either the client's
    // deadline fires first, or the run's partial result (stopped by the deadline) gets back
    // just before it. A loaded machine sees both.
    const outcome = await client
      .runToolLoop({ prompt: 'p', runId: id, llm: sleepyScript(30) }, { timeoutMs: 300 })
      .then(
        (result) => ({ result }),
        (error) => ({ error }),
      );
    if (outcome.error) assert.equal(outcome.error.codeName, 'DEADLINE_EXCEEDED');
    else assert.equal(outcome.result.stopReason, 'STOP_REASON_DEADLINE');
    const info = await waitForEnd(client, id);
    assert.equal(info.state, 'RUN_STATE_CANCELLED');
    assert.equal(info.result.toolCallHistory[0].errorKind, 'ERROR_KIND_CANCELLED');
  });

  test(
    'a run whose deadline passed always ends with STOP_REASON_DEADLINE',
    async () => {
      const reasons = [];
      for (let i = 0; i < 10; i += 1) {
        const id = runId();
        await client
          .runToolLoop({ prompt: 'p', runId: id, llm: sleepyScript(30) }, { timeoutMs: 100 })
          .catch(() => {});
        reasons.push((await waitForEnd(client, id)).result.stopReason);
      }
      assert.deepEqual(reasons, Array(10).fill('STOP_REASON_DEADLINE'));
    },
  );

  test('a detached run survives its stream and can be cancelled from another call', async () => {
    const id = runId();
    const stream = client.streamToolLoop({ prompt: 'p', runId: id, detach: true, llm: sleepyScript(30) });
    for await (const event of stream) if (event.payload === 'toolCallStarted') break;
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal((await client.getRun(id)).state, 'RUN_STATE_RUNNING');
    assert.equal(await client.cancelRun(id), 'RUN_STATE_CANCELLED');
  });
});
