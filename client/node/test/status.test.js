// The status codes of API.md that a client can meet, as this client reports them.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, before, describe, test } from 'node:test';

import { RunFailedError, SidecarClient, SidecarError, Status } from '../src/index.js';
import {
  callTurn,
  collect,
  runId,
  script,
  startFailingSidecar,
  startSidecar,
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

/** An assert.rejects matcher for a SidecarError with this status. */
const status =
  (codeName, details = /./) =>
  (err) => {
    assert.ok(err instanceof SidecarError, `expected a SidecarError, got ${err}`);
    assert.equal(err.codeName, codeName);
    assert.equal(err.code, Status[codeName]);
    assert.match(err.details, details);
    return true;
  };

/** A run that sleeps for `seconds` (so that it stays live for a while). */
const sleeper = (seconds) => script(callTurn('', ['s', 'sleep', { seconds }]), { content: 'done' });

describe('INVALID_ARGUMENT', () => {
  test('an empty or blank prompt, from every RPC that starts a run', async () => {
    await assert.rejects(client.runToolLoop(''), status('INVALID_ARGUMENT', /prompt/));
    await assert.rejects(
      collect(client.streamToolLoop({ prompt: '   ' })),
      status('INVALID_ARGUMENT', /prompt/),
    );
    await assert.rejects(
      client.session({ prompt: '', tools: { t: () => 1 } }).result,
      status('INVALID_ARGUMENT', /prompt/),
    );
  });

  test('a script that is not JSON, or not an array', async () => {
    await assert.rejects(
      client.runToolLoop({ prompt: 'p', llm: { script: '[{' } }),
      status('INVALID_ARGUMENT', /llm.script/),
    );
    await assert.rejects(
      client.runToolLoop({ prompt: 'p', llm: { script: { content: 'x' } } }),
      status('INVALID_ARGUMENT', /array/),
    );
  });

  test('max_iterations below 0 or above the cap', async () => {
    await assert.rejects(client.runToolLoop({ prompt: 'p', maxIterations: -1 }), status('INVALID_ARGUMENT'));
    await assert.rejects(
      client.runToolLoop({ prompt: 'p', maxIterations: 100000 }),
      status('INVALID_ARGUMENT', /cap/),
    );
  });

  test('a JSON field of the wrong shape (not an object)', async () => {
    await assert.rejects(
      client.runToolLoop({ prompt: 'p', context: { resourceBindings: ['a'] } }),
      status('INVALID_ARGUMENT', /resource_bindings/),
    );
    const run = client.session({ prompt: 'p', tools: { t: { inputSchema: 'string', handler: () => 1 } } });
    await assert.rejects(run.result, status('INVALID_ARGUMENT', /input_schema/));
  });

  test('watching past the end of a finished run', async () => {
    const id = runId();
    await client.runToolLoop({ prompt: 'p', runId: id });
    await assert.rejects(
      collect(client.watchRun(id, { afterSequence: 999 })),
      status('INVALID_ARGUMENT', /past/),
    );
  });
});

describe('NOT_FOUND', () => {
  test('an unknown run id, for GetRun, CancelRun and WatchRun', async () => {
    await assert.rejects(client.getRun('no-such-run'), status('NOT_FOUND', /no-such-run/));
    await assert.rejects(client.cancelRun('no-such-run'), status('NOT_FOUND'));
    await assert.rejects(collect(client.watchRun('no-such-run')), status('NOT_FOUND'));
  });

  test('an unknown provider profile, or tool name in tool_names', async () => {
    await assert.rejects(
      client.runToolLoop({ prompt: 'p', llm: { profile: 'gpt-9' } }),
      status('NOT_FOUND', /gpt-9/),
    );
    await assert.rejects(
      client.runToolLoop({ prompt: 'p', toolNames: ['echo', 'nope'] }),
      status('NOT_FOUND', /nope/),
    );
    await assert.rejects(
      client.session({ prompt: 'p', toolNames: ['nope'], tools: { t: () => 1 } }).result,
      status('NOT_FOUND', /nope/),
    );
  });
});

test('ALREADY_EXISTS: a live run id reused', async () => {
  const id = runId();
  const live = client.streamToolLoop({ prompt: 'p', runId: id, llm: sleeper(30) });
  const iterator = live[Symbol.asyncIterator]();
  assert.equal((await iterator.next()).value.payload, 'runStarted'); // the run is live
  await assert.rejects(
    client.runToolLoop({ prompt: 'p', runId: id }),
    status('ALREADY_EXISTS', new RegExp(id)),
  );
  await client.cancelRun(id);
  let last;
  for (let next = await iterator.next(); !next.done; next = await iterator.next()) last = next.value;
  assert.equal(last.payload, 'runCancelled');
});

describe('FAILED_PRECONDITION: session messages out of order (raw stub)', () => {
  test('a tool_result for a call_id that is not awaited ends the session', async () => {
    const call = client.stub.Session();
    const received = [];
    call.on('data', (message) => {
      received.push(message);
      if (message.kind === 'tool_invocation') {
        call.write({ tool_result: { call_id: 'not-a-call', output: '{}' } });
      }
    });
    call.write({
      start: {
        spec: {
          prompt: 'p',
          llm: { script: JSON.stringify([callTurn('', ['c1', 'js', {}]), { content: 'x' }]) },
        },
        tools: [{ name: 'js' }],
      },
    });
    const [err] = await once(call, 'error').catch((e) => [e]);
    assert.ok(status('FAILED_PRECONDITION', /not-a-call/)(new SidecarError(err.code, err.details)));
    const events = received.filter((m) => m.kind === 'event').map((m) => m.event.payload);
    assert.equal(events.at(-1), 'run_cancelled', 'the run ends with its terminal event first');
  });

  test('a first message that is not start, and a second start', async () => {
    const first = client.stub.Session();
    first.on('data', () => {});
    first.write({ cancel: { reason: 'too early' } });
    const [e1] = await once(first, 'error').catch((e) => [e]);
    assert.equal(e1.code, Status.FAILED_PRECONDITION);

    const second = client.stub.Session();
    second.on('data', () => {});
    const start = {
      start: {
        spec: { prompt: 'p', llm: { script: JSON.stringify([callTurn('', ['c', 'js', {}])]) } },
        tools: [{ name: 'js' }],
      },
    };
    second.write(start);
    second.write(start);
    const [e2] = await once(second, 'error').catch((e) => [e]);
    assert.equal(e2.code, Status.FAILED_PRECONDITION);
    assert.match(e2.details, /already started/);
  });
});

describe('UNAVAILABLE: a run whose LLM fails', () => {
  let failing;
  let failingClient;

  before(async () => {
    failing = await startFailingSidecar();
    failingClient = new SidecarClient(failing.address);
  });

  after(async () => {
    failingClient?.close();
    await failing?.stop();
  });

  test('runToolLoop rejects with RunFailedError and the partial result', async () => {
    await assert.rejects(failingClient.runToolLoop({ prompt: 'p' }), (err) => {
      assert.ok(err instanceof RunFailedError);
      assert.ok(status('UNAVAILABLE', /overloaded/)(err));
      assert.equal(err.result.stopReason, 'STOP_REASON_ERROR');
      assert.equal(err.result.content, 'one turn only');
      assert.deepEqual(err.result.toolCallHistory[0].output, { text: 'kept' });
      return true;
    });
  });

  test('a session result rejects the same way', async () => {
    const run = failingClient.session({ prompt: 'p', tools: { js: () => ({}) } });
    await assert.rejects(
      run.result,
      (err) => err instanceof RunFailedError && err.codeName === 'UNAVAILABLE',
    );
  });
});

describe('FAILED_PRECONDITION: a script that runs out of turns', () => {
  test('retrying cannot help, so it is not UNAVAILABLE', async () => {
    const turns = script(callTurn('one turn only', ['c', 'echo', { text: 'kept' }]));
    await assert.rejects(client.runToolLoop({ prompt: 'p', llm: turns }), (err) => {
      assert.ok(err instanceof RunFailedError);
      assert.ok(status('FAILED_PRECONDITION', /script has 1 response/)(err));
      assert.equal(err.result.toolCallHistory.length, 1);
      return true;
    });
  });
});

test('RESOURCE_EXHAUSTED: too many concurrent runs', async () => {
  const small = await startSidecar(['--max-concurrent-runs', '1']);
  const other = new SidecarClient(small.address);
  try {
    const live = other.streamToolLoop({ prompt: 'p', llm: sleeper(30) });
    const iterator = live[Symbol.asyncIterator]();
    await iterator.next(); // runStarted: the one run allowed is live
    await assert.rejects(other.runToolLoop('p'), status('RESOURCE_EXHAUSTED'));
    live.cancel();
    await assert.rejects(async () => {
      while (!(await iterator.next()).done); // events already received come first
    }, status('CANCELLED'));
  } finally {
    other.close();
    await small.stop();
  }
});

describe('client-side statuses', () => {
  test('UNAVAILABLE when nothing listens; waitForReady times out', async () => {
    const nowhere = new SidecarClient('127.0.0.1:1');
    try {
      await assert.rejects(nowhere.listTools({ timeoutMs: 2000 }), status('UNAVAILABLE'));
      await assert.rejects(nowhere.waitForReady(100));
    } finally {
      nowhere.close();
    }
  });
});

describe('RESOURCE_EXHAUSTED: a message over a limit names the limit to raise', () => {
  test("a request over the sidecar's max_message_bytes", async () => {
    const small = await startSidecar(['--max-message-bytes', '4096']);
    const other = new SidecarClient(small.address);
    try {
      await assert.rejects(
        other.runToolLoop('x'.repeat(8000)),
        status('RESOURCE_EXHAUSTED', /^the request is \d+ bytes, more than the sidecar's max_message_bytes \(4096\)/),
      );
    } finally {
      other.close();
      await small.stop();
    }
  });

  test("a response over this client's receive limit, a request over its send limit", async () => {
    const limited = new SidecarClient(sidecar.address, {
      channelOptions: { 'grpc.max_receive_message_length': 64, 'grpc.max_send_message_length': 64 },
    });
    try {
      await assert.rejects(
        limited.listTools(),
        status('RESOURCE_EXHAUSTED', /more than this client accepts \(64\): raise channelOptions\['grpc\.max_receive/),
      );
      await assert.rejects(
        limited.runToolLoop('x'.repeat(100)),
        status('RESOURCE_EXHAUSTED', /more than this client sends \(64 bytes\)/),
      );
    } finally {
      limited.close();
    }
  });
});
