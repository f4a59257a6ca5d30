// Results that leave out their records, on a sidecar with a 64 KiB message limit: streams read
// them back with their own metadata, and in the order the model asked for the calls.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { callTurn, collect, runId, script, startSidecar } from './sidecar.js';

const TOKEN = 'per-call-token';
const auth = { authorization: `Bearer ${TOKEN}` };

let dir;
let sidecar;
let client;

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'history-auth-'));
  writeFileSync(path.join(dir, 'token'), TOKEN);
  // A 64 KiB message limit: six 8 kB echoes (each record holds the text twice) make a result
  // that leaves out its records, from a spec that still fits.
  const config = path.join(dir, 'sidecar.toml');
  const settings = `auth_token_file = "${path.join(dir, 'token')}"\nmax_message_bytes = 65536\n`;
  writeFileSync(config, settings);
  sidecar = await startSidecar(['--config', config]);
  client = new SidecarClient(sidecar.address); // no token of its own: each call brings one
});

after(async () => {
  client?.close();
  await sidecar?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('streams put the records back with the per-call metadata', async () => {
  const text = 'e'.repeat(8_000);
  const ids = ['e1', 'e2', 'e3', 'e4', 'e5', 'e6'];
  const turns = ids.map((id) => callTurn('', [id, 'echo', { text }]));
  const spec = { prompt: 'echo', run_id: runId('auth'), llm: script(...turns, { content: 'done' }) };
  const streamed = await collect(client.streamToolLoop(spec, { metadata: auth }));
  const terminal = streamed.at(-1).run_completed.result;
  assert.deepEqual(terminal.tool_call_history.map((r) => r.call_id), ids);
  // A watcher joining after the calls did not see them: it pages them in, with its token.
  const late = { afterSequence: streamed.length - 1, metadata: auth };
  const watched = await collect(client.watchRun(spec.run_id, late));
  const history = watched.at(-1).run_completed.result.tool_call_history;
  assert.deepEqual(history.map((r) => r.call_id), ids);
});

test('records put back keep the order the model asked, not the order they finished', async () => {
  const text = 'e'.repeat(8_000);
  const turns = [];
  const asked = [];
  for (let i = 0; i < 5; i += 1) {
    turns.push(callTurn('', [`s${i}`, 'sleep', { seconds: 0.05 }], [`e${i}`, 'echo', { text }]));
    asked.push(`s${i}`, `e${i}`);
  }
  const spec = { prompt: 'go', run_id: runId('order'), max_iterations: 5, llm: script(...turns) };
  const events = await collect(client.streamToolLoop(spec, { metadata: auth }));
  const finished = events.filter((e) => e.payload === 'tool_call_completed');
  assert.deepEqual(
    finished.slice(0, 2).map((e) => e.tool_call_completed.record.call_id),
    ['e0', 's0'],
  );
  const streamed = events.at(-1).run_completed.result.tool_call_history;
  assert.deepEqual(streamed.map((r) => r.call_id), asked);
  const paged = await client.runToolLoop({ ...spec, run_id: runId('order') }, { metadata: auth });
  assert.deepEqual(paged.tool_call_history.map((r) => r.call_id), asked);
});
