// Identities: each client sends its own token in `metadata`, and sees only its own runs.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { SidecarClient, Status } from '../src/index.js';
import { runId, script, startSidecar } from './sidecar.js';

let sidecar;
let dir;
let alice;
let bob;

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'identities-'));
  writeFileSync(path.join(dir, 'alice.token'), 'alice-node-token\n');
  writeFileSync(path.join(dir, 'bob.token'), 'bob-node-token\n');
  const config = path.join(dir, 'sidecar.toml');
  writeFileSync(config, '[clients.alice]\ntoken_file = "alice.token"\n\n[clients.bob]\ntoken_file = "bob.token"\n');
  sidecar = await startSidecar(['--config', config]);
  alice = new SidecarClient(sidecar.address, { metadata: { authorization: 'Bearer alice-node-token' } });
  bob = new SidecarClient(sidecar.address, { metadata: { authorization: 'Bearer bob-node-token' } });
});

after(async () => {
  alice?.close();
  bob?.close();
  await sidecar?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("another identity's run is NOT_FOUND, and its own is there", async () => {
  const id = runId('alice');
  await alice.runToolLoop({ prompt: 'mine', runId: id, llm: script({ content: 'kept' }) });
  await assert.rejects(bob.getRun(id), (err) => err.code === Status.NOT_FOUND);
  assert.equal((await alice.getRun(id)).result.content, 'kept');
});
