// A session's approver: the sidecar asks this client about its gated calls (write_file under
// the default `supervised` automation profile), and the client answers each one.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { assertEventLog, callTurn, collect, script, useSidecar } from './sidecar.js';

let sidecar;
let client;
let dir;

before(async () => {
  sidecar = await useSidecar();
  client = new SidecarClient(sidecar.address);
  // The tests' sidecars allow sandboxes under the temporary directory only.
  dir = mkdtempSync(path.join(realpathSync(os.tmpdir()), 'approvals-'));
});

after(async () => {
  client?.close();
  await sidecar?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const writeTwo = (sandbox) => ({
  prompt: 'Write the notes and the build script.',
  context: { sandboxRoot: sandbox },
  llm: script(
    callTurn('notes', ['w1', 'write_file', { path: 'NOTES.md', content: '# notes\n' }]),
    callTurn('script', ['w2', 'write_file', { path: 'build.sh', content: 'rm -rf /\n' }]),
    { content: 'done' },
  ),
});

const decisions = (events) =>
  events.filter((e) => e.payload === 'approvalDecided').map((e) => e.approvalDecided);

test('the approver decides each gated call: an approved write runs, a denied one does not', async () => {
  const sandbox = mkdtempSync(path.join(dir, 'run-'));
  const asked = [];
  const run = client.session({
    ...writeTwo(sandbox),
    approver: async (request) => {
      asked.push(request);
      return request.inputs.path.endsWith('.md')
        ? { approved: true, reason: 'docs only' }
        : { approved: false, reason: 'only Markdown files may be written' };
    },
  });
  const events = await collect(run);
  assertEventLog(assert, events);
  const result = await run.result;
  assert.deepEqual(
    asked.map((r) => [r.runId, r.callId, r.toolName, r.inputs.path, r.iteration]),
    [[run.runId, 'w1', 'write_file', 'NOTES.md', 1], [run.runId, 'w2', 'write_file', 'build.sh', 2]],
  );
  assert.match(asked[0].reason, /supervised/);
  assert.ok(asked[0].signal instanceof AbortSignal);
  assert.deepEqual(
    decisions(events).map((d) => [d.callId, d.approved, d.reason, d.decidedBy]),
    [['w1', true, 'docs only', 'session'], ['w2', false, 'only Markdown files may be written', 'session']],
  );
  assert.equal(readFileSync(path.join(sandbox, 'NOTES.md'), 'utf8'), '# notes\n');
  assert.ok(!existsSync(path.join(sandbox, 'build.sh')));
  const [wrote, denied] = result.toolCallHistory;
  assert.ok(wrote.success);
  assert.equal(denied.errorKind, 'ERROR_KIND_DENIED');
  assert.equal(denied.error, 'denied by session: only Markdown files may be written');
});

test('an approver returning true or false decides without a reason', async () => {
  const sandbox = mkdtempSync(path.join(dir, 'run-'));
  const run = client.session({ ...writeTwo(sandbox), approver: (r) => r.callId === 'w1' });
  const events = await collect(run);
  assert.deepEqual(
    decisions(events).map((d) => [d.callId, d.approved, d.reason]),
    [['w1', true, ''], ['w2', false, '']],
  );
  assert.ok(existsSync(path.join(sandbox, 'NOTES.md')));
  assert.ok(!existsSync(path.join(sandbox, 'build.sh')));
});

test('an approver that throws denies the call, saying why, and the run goes on', async () => {
  const sandbox = mkdtempSync(path.join(dir, 'run-'));
  const run = client.session({
    ...writeTwo(sandbox),
    approver: () => {
      throw new Error('policy service unreachable');
    },
  });
  const events = await collect(run);
  assert.equal((await run.result).content, 'done');
  assert.deepEqual(
    decisions(events).map((d) => [d.approved, d.reason]),
    [
      [false, 'the approver failed: Error: policy service unreachable'],
      [false, 'the approver failed: Error: policy service unreachable'],
    ],
  );
  assert.ok(!existsSync(path.join(sandbox, 'NOTES.md')));
});

test('approval_requested events carry their inputs as an object', async () => {
  const sandbox = mkdtempSync(path.join(dir, 'run-'));
  const events = await collect(client.session({ ...writeTwo(sandbox), approver: () => true }));
  const requested = events.filter((e) => e.payload === 'approvalRequested').map((e) => e.approvalRequested);
  const { path: file, content } = requested[0].inputs;
  assert.deepEqual([file, content], ['NOTES.md', '# notes\n']);
  assert.match(requested[0].howToAnswer, /\S/);
});

test('an approver that is not a function is a TypeError', () => {
  assert.throws(() => client.session({ prompt: 'x', approver: 'yes' }), TypeError);
});

test("a session tool declaring side_effects is gated like the sidecar's own: the approver decides it", async () => {
  const asked = [];
  const wrote = [];
  const run = client.session({
    prompt: 'Write a note, then read it.',
    tools: {
      write_note: { sideEffects: true, handler: ({ text }) => wrote.push(text) },
      read_note: () => ({ text: wrote.join('') }),
    },
    llm: script(callTurn('both', ['w', 'write_note', { text: 'hi' }], ['r', 'read_note', {}]), { content: 'done' }),
    approver: (request) => {
      asked.push(request.toolName);
      return { approved: true, reason: 'notes are fine' };
    },
  });
  const events = await collect(run);
  assert.deepEqual(asked, ['write_note']);
  assert.deepEqual(decisions(events).map((d) => [d.callId, d.approved, d.reason]), [['w', true, 'notes are fine']]);
  assert.deepEqual(wrote, ['hi']);
  assert.equal((await run.result).toolCallHistory.length, 2);
});
