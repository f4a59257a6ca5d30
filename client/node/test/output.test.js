// Structured output: a run's outputSchema, and its validated answer parsed in result.output,
// from a scripted run and from a client-hosted LLM (the schema in its request, retries shown).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { callTurn, collect, script, useSidecar } from './sidecar.js';

const CITY = {
  name: 'city',
  description: 'A city and how many live there.',
  schema: {
    type: 'object',
    properties: { city: { type: 'string' }, population: { type: 'integer' } },
    required: ['city', 'population'],
    additionalProperties: false,
  },
};

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

describe('output_schema', () => {
  test('a scripted run returns the validated answer parsed', async () => {
    const result = await client.runToolLoop({
      prompt: 'Which city?',
      outputSchema: CITY,
      llm: script(callTurn('Echo first.', ['c1', 'echo', { text: 'Lyon' }]), { output: { city: 'Lyon', population: 522000 } }),
    });
    assert.equal(result.stopReason, 'STOP_REASON_FINAL_ANSWER');
    assert.deepEqual(result.output, { city: 'Lyon', population: 522000 });
    assert.equal(result.outputJson, '{"city":"Lyon","population":522000}');
    assert.equal(result.toolCallHistory.length, 1);
  });

  test('the run_started spec and the terminal event carry the schema and the answer', async () => {
    const events = await collect(
      client.streamToolLoop({ prompt: 'x', outputSchema: CITY, llm: script({ output: { city: 'Oslo', population: 709000 } }) }),
    );
    assert.deepEqual(events[0].runStarted.spec.outputSchema, CITY);
    assert.equal(events[0].runStarted.spec.maxOutputRetries, null);
    assert.deepEqual(events.at(-1).runCompleted.result.output, { city: 'Oslo', population: 709000 });
  });

  test('past max_output_retries the run ends with its stop reason and the last text', async () => {
    const result = await client.runToolLoop({
      prompt: 'x',
      outputSchema: CITY,
      maxOutputRetries: 0,
      llm: script({ content: 'Lyon, I think' }),
    });
    assert.equal(result.stopReason, 'STOP_REASON_MAX_OUTPUT_RETRIES');
    assert.equal(result.terminatedByLimit, true);
    assert.equal(result.content, 'Lyon, I think');
    assert.equal(result.output, null);
    assert.match(result.outputError, /^the answer is not JSON/);
  });

  test('a client-hosted LLM gets the schema and is shown the error of an invalid answer', async () => {
    const requests = [];
    const run = client.session({
      prompt: 'Which city?',
      outputSchema: CITY,
      llm: (request) => {
        requests.push(request);
        return request.iteration === 1 ? { content: '{"city": "Rome"}' } : { content: '{"city": "Rome", "population": 2800000}' };
      },
    });
    const result = await run.result;
    assert.deepEqual(result.output, { city: 'Rome', population: 2800000 });
    assert.deepEqual(requests[0].outputSchema, CITY);
    const shown = requests[1].messages.at(-1);
    assert.equal(shown.role, 'ROLE_USER');
    assert.match(shown.content, /"population" is a required property/);
  });

  test('a client-hosted refusal ends the run with STOP_REASON_REFUSAL', async () => {
    const result = await client.session({ prompt: 'x', outputSchema: CITY, llm: () => ({ refusal: 'Not this.' }) }).result;
    assert.equal(result.stopReason, 'STOP_REASON_REFUSAL');
    assert.equal(result.content, 'Not this.');
  });

  test('a hostile schema is refused with INVALID_ARGUMENT', async () => {
    const defs = { d0: { type: 'string' } };
    for (let n = 1; n <= 40; n += 1) defs[`d${n}`] = { allOf: [{ $ref: `#/$defs/d${n - 1}` }, { $ref: `#/$defs/d${n - 1}` }] };
    const schema = { type: 'object', properties: { x: { $ref: '#/$defs/d40' } }, $defs: defs };
    await assert.rejects(
      client.runToolLoop({ prompt: 'x', outputSchema: { name: 'hostile', schema }, llm: script({ output: {} }) }),
      (err) => err.code === 3 && /max_schema_expansion/.test(err.message),
    );
  });
});
