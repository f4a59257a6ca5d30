// The example runs against a real sidecar and prints what the README shows.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { WAIT_MS, useSidecar } from './sidecar.js';

const EXAMPLE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../examples/session.js');
let sidecar;

before(async () => {
  sidecar = await useSidecar();
});

after(async () => {
  await sidecar?.stop();
});

test('examples/session.js hosts two tools and prints each record, then the result', async () => {
  const { stdout } = await promisify(execFile)(process.execPath, [EXAMPLE, sidecar.address], {
    timeout: WAIT_MS,
  });
  const lines = stdout.trim().split('\n');
  assert.match(
    lines[0],
    /^#\d+ +call_1 {2}capital_of .* ms {2}ok {6}\{"country":"France","capital":"Paris"\}$/,
  );
  assert.match(lines[1], /^#\d+ +call_2 {2}capital_of .* ms {2}FAILED {2}no capital on file for Atlantis$/);
  assert.match(lines[2], /^#\d+ +call_3 {2}word_count .* ms {2}ok {6}\{"result":6\}$/);
  assert.equal(lines[4], 'final answer: The capital of France is Paris (6 words). Atlantis is not on file.');
  assert.equal(
    lines[5],
    'STOP_REASON_FINAL_ANSWER, 3 iterations, 3 tool calls (1 failed), tokens in/out 1530/98',
  );
});
