// A watcher with streamDeltas that is dropped for falling behind reconnects and yields each
// piece of the model's answer once: the catch-up the sidecar resends from index 0 is trimmed.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import grpc from '@grpc/grpc-js';

import { SidecarClient } from '../src/index.js';
import { runId, startSidecar } from './sidecar.js';

let dir;
let sidecar;
let client;
let follows = 0; // FollowRun calls opened

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'deltas-reconnect-'));
  const config = path.join(dir, 'sidecar.toml');
  writeFileSync(config, '[profiles.slow]\nkind = "scripted"\nstream_delay = 0.1\n');
  // A 4 KiB window and a 0.3 s stall: a watcher that pauses is dropped mid-answer.
  sidecar = await startSidecar(['--config', config, '--watcher-stall-s', '0.3', '--watch-window-bytes', '4096']);
  const counting = (options, nextCall) => {
    if (options.method_definition.path.endsWith('/FollowRun')) follows += 1;
    return new grpc.InterceptingCall(nextCall(options));
  };
  client = new SidecarClient(sidecar.address, { channelOptions: { interceptors: [counting] } });
});

after(async () => {
  client?.close();
  await sidecar?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test('a slow watcher reconnected mid-answer yields each piece of the text once', async () => {
  const answer = Array.from({ length: 2000 }, (_, i) => `w${i}`).join(' ');
  const id = runId('redelta');
  const starter = client.streamToolLoop({
    prompt: 'go',
    runId: id,
    detach: true,
    llm: { profile: 'slow', script: [{ content: answer }] },
  });
  for await (const event of starter) if (event.payload === 'runStarted') break;

  let text = '';
  let next = 0;
  let deltas = 0;
  let responded = null;
  for await (const event of client.watchRun(id, { streamDeltas: true })) {
    if (event.payload === 'llmDelta') {
      const delta = event.llmDelta;
      assert.equal(delta.index, next, 'no delta yielded twice or skipped');
      next = delta.index + delta.count;
      text += delta.text;
      deltas += 1;
      // A consumer that stops reading for 3 s: its 4 KiB window fills (some 2 s of the
      // model's deltas) and the sidecar drops it 0.3 s later, while the model (some 7 s of
      // deltas 0.1 s apart) is still answering. The pause is the consumer's pace, not a
      // synchronisation: the test fails if no reconnection happened.
      if (deltas === 2) await sleep(3000);
    } else if (event.payload === 'llmResponded') {
      responded = event.llmResponded.content;
    }
  }
  assert.ok(follows >= 2, 'the watcher was dropped and reconnected');
  assert.equal(responded, answer);
  assert.equal(text, answer);
});
