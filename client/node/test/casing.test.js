// One casing: the API's fields are camelCase, its enums unions of the protos' names; the
// snake_case names of the first release still work for one more release, with a warning.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { SidecarClient, loadService } from '../src/index.js';
import { callTurn, collect, script, useSidecar } from './sidecar.js';

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

/** The deprecation warning this process emits about the snake_case name `name`. */
function warningAbout(name) {
  return new Promise((resolve) => {
    const heard = (warning) => {
      if (warning.code !== 'CLEVERAGENTS_SNAKE_CASE' || !warning.message.startsWith(`'${name}'`)) return;
      process.off('warning', heard);
      resolve(warning);
    };
    process.on('warning', heard);
  });
}

/**
 * Every key of `value` and of the objects and arrays within it (parsed JSON values too), but
 * those of a scripted LLM's `script`: its turns are in the sidecar's own format.
 */
function allKeys(value, keys = new Set()) {
  if (Array.isArray(value)) value.forEach((v) => allKeys(v, keys));
  else if (value && typeof value === 'object' && !(value instanceof Date)) {
    for (const [key, inner] of Object.entries(value)) {
      keys.add(key);
      if (key !== 'script') allKeys(inner, keys);
    }
  }
  return keys;
}

test('events and results are camelCase through and through, their payload names too', async () => {
  const events = await collect(
    client.streamToolLoop({
      prompt: 'p',
      llm: script(callTurn('', ['c1', 'echo', { text: 'hi' }]), { content: 'done' }),
    }),
  );
  assert.deepEqual(
    [...new Set(events.map((e) => e.payload))],
    ['runStarted', 'iterationStarted', 'llmResponded', 'toolCallStarted', 'toolCallCompleted', 'runCompleted'],
  );
  for (const event of events) assert.ok(event[event.payload], `${event.payload} holds its data`);
  const snake = [...allKeys(events)].filter((key) => key.includes('_'));
  assert.deepEqual(snake, [], 'no snake_case key is enumerable');
  const { result } = events.at(-1).runCompleted;
  assert.equal(result.toolCallHistory[0].toolName, 'echo');
  assert.equal(result.stopReason, 'STOP_REASON_FINAL_ANSWER');
});

test("a result's snake_case field of the first release reads the camelCase one, with a deprecation warning", async () => {
  const result = await client.runToolLoop({ prompt: 'p', llm: script({ content: 'done' }) });
  const warned = warningAbout('stop_reason');
  assert.equal(result.stop_reason, result.stopReason);
  const warning = await warned;
  assert.equal(warning.name, 'DeprecationWarning');
  assert.match(warning.message, /'stop_reason' is deprecated: .*'stopReason'/);
  assert.equal(result.tool_call_history, result.toolCallHistory);
  assert.ok(!Object.keys(result).includes('stop_reason'), 'the old name is not enumerable');
  assert.ok(!JSON.stringify(result).includes('stop_reason'));
});

test('a snake_case spec field of the first release is taken for its camelCase one, with a warning', async () => {
  const warned = warningAbout('max_iterations');
  const result = await client.runToolLoop({
    prompt: 'p',
    max_iterations: 1,
    llm: script(callTurn('', ['c1', 'echo', { text: 'a' }]), { content: 'never' }),
  });
  assert.equal(result.stopReason, 'STOP_REASON_MAX_ITERATIONS', 'max_iterations counted');
  assert.match((await warned).message, /'max_iterations' is deprecated: .*'maxIterations'/);
});

test('a spec that names one field both ways is a TypeError', async () => {
  await assert.rejects(client.runToolLoop({ prompt: 'p', runId: 'a', run_id: 'b' }), {
    name: 'TypeError',
    message: /run spec has both 'runId' and 'run_id'/,
  });
});

test("a tool definition's snake_case field is taken, and an unknown one refused", async () => {
  const run = client.session({
    prompt: 'p',
    llm: script(callTurn('', ['c1', 'shout', { text: 3 }]), { content: 'done' }),
    tools: { shout: { input_schema: { type: 'object', properties: { text: { type: 'string' } } }, handler: () => ({}) } },
  });
  const [record] = (await run.result).toolCallHistory;
  assert.equal(record.errorKind, 'ERROR_KIND_INVALID_ARGUMENTS', 'the schema was declared');
  assert.throws(() => client.session({ prompt: 'p', tools: { t: { handler: () => 1, sideEffect: true } } }), {
    name: 'TypeError',
    message: /unknown tool definition field 'sideEffect'/,
  });
});

test('the enum types are unions of exactly the values of the protos\' enums', () => {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const declarations = readFileSync(path.join(here, '../types/values.d.ts'), 'utf8');
  const { definition } = loadService();
  for (const name of ['StopReason', 'ErrorKind', 'RunState', 'Role']) {
    const declared = new RegExp(`export type ${name} = ([^;]*);`).exec(declarations);
    assert.ok(declared, `types/values.d.ts declares ${name}`);
    const union = [...declared[1].matchAll(/"([A-Z_]+)"/g)].map((m) => m[1]);
    const proto = definition[`cleveragents.toolruntime.v1.${name}`].type.value.map((v) => v.name);
    assert.deepEqual(union, proto, `${name} lists the proto's values, in order`);
  }
});
