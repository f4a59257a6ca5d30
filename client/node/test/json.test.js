// JSON text the sidecar refuses: a string cut inside an emoji is half a character (a lone
// surrogate), which JSON.stringify writes as "\ud83d" and UTF-8 has no form for.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { assertEventLog, callTurn, collect, script, useSidecar } from './sidecar.js';

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

const completed = (events) =>
  events.filter((e) => e.payload === 'toolCallCompleted').map((e) => e.toolCallCompleted.record);
const started = (events) => events.filter((e) => e.payload === 'toolCallStarted');

describe('lone surrogates', () => {
  test('a JS tool returning a string cut inside an emoji gets a failed record, and the run goes on', async () => {
    const cut = '🙂🙂🙂'.slice(0, 5); // two emoji and half of the third
    assert.equal(JSON.stringify(cut), '"🙂🙂\\ud83d"');
    const run = client.session({
      prompt: 'Shorten it.',
      llm: script(callTurn('', ['c1', 'shorten', {}], ['c2', 'whole', {}]), { content: 'done' }),
      tools: { shorten: () => cut, whole: () => '🙂🙂' },
    });
    const events = await collect(run);
    assertEventLog(assert, events);
    assert.equal(events.at(-1).payload, 'runCompleted');
    assert.equal(started(events).length, 2);
    const [bad, good] = completed(events);
    assert.equal(bad.callId, 'c1');
    assert.equal(bad.success, false);
    assert.equal(bad.errorKind, 'ERROR_KIND_EXCEPTION');
    assert.match(bad.error, /lone surrogate \\ud83d/);
    assert.deepEqual(good.output, { result: '🙂🙂' });
    assert.equal((await run.result).content, 'done');
  });

  test('a JS LLM asking for a file path with a lone surrogate gets a failed record it then sees', async () => {
    const seen = [];
    const run = client.session({
      prompt: 'Read the file.',
      llm: async (request) => {
        seen.push(structuredClone(request));
        if (request.iteration === 1) {
          const path = `notes-${'🙂'.slice(0, 1)}.txt`;
          return { toolCalls: [{ id: 'r1', name: 'read_file', arguments: { path } }] };
        }
        return 'could not read it';
      },
    });
    const events = await collect(run);
    assertEventLog(assert, events);
    assert.equal(events.at(-1).payload, 'runCompleted');
    const [record] = completed(events);
    assert.equal(record.success, false);
    assert.equal(record.errorKind, 'ERROR_KIND_INVALID_ARGUMENTS');
    assert.match(record.error, /not valid JSON \(a string holds a lone surrogate \\ud83d/);
    const answer = seen[1].messages.at(-1);
    assert.equal(answer.toolCallId, 'r1');
    assert.equal(answer.isError, true);
    assert.match(answer.content, /lone surrogate/);
  });
});
