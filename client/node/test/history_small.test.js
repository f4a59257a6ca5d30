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
  const spec = { prompt: 'echo', runId: runId('auth'), llm: script(...turns, { content: 'done' }) };
  const streamed = await collect(client.streamToolLoop(spec, { metadata: auth }));
  const terminal = streamed.at(-1).runCompleted.result;
  assert.deepEqual(terminal.toolCallHistory.map((r) => r.callId), ids);
  // A watcher joining after the calls did not see them: it pages them in, with its token.
  const late = { afterSequence: streamed.length - 1, metadata: auth };
  const watched = await collect(client.watchRun(spec.runId, late));
  const history = watched.at(-1).runCompleted.result.toolCallHistory;
  assert.deepEqual(history.map((r) => r.callId), ids);
});

test('records put back keep the order the model asked, not the order they finished', async () => {
  const text = 'e'.repeat(8_000);
  const turns = [];
  const asked = [];
  for (let i = 0; i < 5; i += 1) {
    turns.push(callTurn('', [`s${i}`, 'sleep', { seconds: 0.05 }], [`e${i}`, 'echo', { text }]));
    asked.push(`s${i}`, `e${i}`);
  }
  const spec = { prompt: 'go', runId: runId('order'), maxIterations: 5, llm: script(...turns) };
  const events = await collect(client.streamToolLoop(spec, { metadata: auth }));
  const finished = events.filter((e) => e.payload === 'toolCallCompleted');
  assert.deepEqual(
    finished.slice(0, 2).map((e) => e.toolCallCompleted.record.callId),
    ['e0', 's0'],
  );
  const streamed = events.at(-1).runCompleted.result.toolCallHistory;
  assert.deepEqual(streamed.map((r) => r.callId), asked);
  const paged = await client.runToolLoop({ ...spec, runId: runId('order') }, { metadata: auth });
  assert.deepEqual(paged.toolCallHistory.map((r) => r.callId), asked);
});
