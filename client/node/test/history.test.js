// Results bigger than one message: GetRunHistory pages, and the records put back everywhere.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { assertEventLog, callTurn, collect, runId, script, useSidecar } from './sidecar.js';

const MIB = 1024 * 1024;
const READS = 17; // 17 MiB of output: more than the sidecar's 16 MiB max_message_bytes

let sidecar;
let client;
let sandbox;

before(async () => {
  sidecar = await useSidecar();
  client = new SidecarClient(sidecar.address);
  sandbox = mkdtempSync(path.join(os.tmpdir(), 'history-'));
  writeFileSync(path.join(sandbox, 'big.txt'), 'a'.repeat(MIB));
});

after(async () => {
  client?.close();
  await sidecar?.stop();
  if (sandbox) rmSync(sandbox, { recursive: true, force: true });
});

function readsSpec(id) {
  const turns = [];
  for (let i = 1; i <= READS; i += 1) turns.push(callTurn('', [`r${i}`, 'read_file', { path: 'big.txt' }]));
  turns.push({ content: 'read them all' });
  return { prompt: 'read', runId: id, context: { sandboxRoot: sandbox }, llm: script(...turns) };
}

const callIds = Array.from({ length: READS }, (_, i) => `r${i + 1}`);

describe('a run whose result is bigger than one message', () => {
  test('runToolLoop, getRun, watchRun and runHistory all give every record, in order', async () => {
    const id = runId('big');
    const result = await client.runToolLoop(readsSpec(id));
    assert.equal(result.historyOmitted, true);
    assert.equal(result.toolCallCount, READS);
    assert.deepEqual(result.toolCallHistory.map((r) => r.callId), callIds);
    assert.ok(result.toolCallHistory.every((r) => r.output.content.length === MIB));

    const info = await client.getRun(id);
    assert.deepEqual(info.result.toolCallHistory.map((r) => r.callId), callIds);

    const watched = await collect(client.watchRun(id));
    assertEventLog(assert, watched);
    assert.deepEqual(watched.at(-1).runCompleted.result.toolCallHistory.map((r) => r.callId), callIds);

    const paged = await collect(client.runHistory(id));
    assert.deepEqual(paged.map((e) => e.sequence), watched.map((e) => e.sequence));
    assert.deepEqual(
      paged.filter((e) => e.payload === 'toolCallCompleted').map((e) => e.toolCallCompleted.record.callId),
      callIds,
    );
  });

  test('a failed run rejects with every record of its partial result', async () => {
    const spec = readsSpec(runId('failed'));
    spec.llm.script.pop(); // the script runs out after the reads: the run fails
    const error = await client.runToolLoop(spec).then(
      () => assert.fail('the run should have failed'),
      (err) => err,
    );
    assert.equal(error.name, 'RunFailedError');
    assert.equal(error.result.historyOmitted, true);
    assert.deepEqual(error.result.toolCallHistory.map((r) => r.callId), callIds);
  });

  test('getRunHistory pages stay small when asked, and say where the log ends', async () => {
    const id = runId('pages');
    await client.runToolLoop({
      prompt: 'echo',
      runId: id,
      llm: script(callTurn('', ['e1', 'echo', { text: 'x'.repeat(3000) }]), { content: 'done' }),
    });
    const first = await client.getRunHistory(id, { maxBytes: 1000 });
    assert.equal(first.events.length, 1);
    assert.equal(first.events[0].payload, 'runStarted');
    assert.equal(first.finished, true);
    const all = await collect(client.runHistory(id, { maxBytes: 1000 }));
    assert.deepEqual(all.map((e) => e.sequence), Array.from({ length: first.lastSequence }, (_, i) => i + 1));
    const rest = await client.getRunHistory(id, { afterSequence: first.lastSequence });
    assert.deepEqual(rest.events, []);
  });
});

describe('a session whose result is bigger than one message', () => {
  test('its result holds every record, from the events it carried', async () => {
    const blob = (inputs) => ({ blob: String(inputs.n).repeat(MIB) });
    const turns = [];
    for (let i = 1; i <= READS; i += 1) turns.push(callTurn('', [`b${i}`, 'blob', { n: i % 10 }]));
    turns.push({ content: 'done' });
    const run = client.session({ prompt: 'blobs', tools: { blob }, llm: script(...turns) });
    const result = await run.result;
    assert.equal(result.historyOmitted, true);
    assert.deepEqual(result.toolCallHistory.map((r) => r.callId), turns.slice(0, READS).map((t) => t.tool_calls[0].id));
    assert.ok(result.toolCallHistory.every((r) => r.output.blob.length === MIB));
  });
});
