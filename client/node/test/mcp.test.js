// MCP tools through a real sidecar: one started with `[mcp_servers]` in its configuration
// (the reference `mcp-server-time` and the repository's SDK-written fault server, over stdio),
// called by scripted runs from this client, their progress streamed as `tool_call_progress`.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { SidecarClient } from '../src/index.js';
import { REPO_ROOT, callTurn, collect, script, startSidecar } from './sidecar.js';

const VENV_BIN = path.join(REPO_ROOT, '.venv/bin');
const FAULTS = path.join(REPO_ROOT, 'tests/mcp_tools/servers/faults.py');

let sidecar;
let dir;
let client;

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'mcp-'));
  const config = path.join(dir, 'sidecar.toml');
  writeFileSync(
    config,
    [
      '[mcp_servers.time]',
      `command = ${JSON.stringify(path.join(VENV_BIN, 'mcp-server-time'))}`,
      'args = ["--local-timezone", "UTC"]',
      '[mcp_servers.f]',
      `command = ${JSON.stringify(path.join(VENV_BIN, 'python'))}`,
      `args = [${JSON.stringify(FAULTS)}]`,
      `env = { FAULT_DIR = ${JSON.stringify(dir)} }`,
      'progress_interval = 0',
      '',
    ].join('\n'),
  );
  sidecar = await startSidecar(['--config', config]);
  client = new SidecarClient(sidecar.address);
});

after(async () => {
  client?.close();
  await sidecar?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test('a scripted run calls an MCP server tool and gets its structured result', async () => {
  const llm = script(
    callTurn('', ['t1', 'time_convert_time', { source_timezone: 'Europe/Paris', time: '09:30', target_timezone: 'Asia/Tokyo' }]),
    { content: 'done' },
  );
  const result = await client.runToolLoop({ prompt: 'when?', llm });

  const [record] = result.toolCallHistory;
  assert.equal(record.success, true, record.error ?? '');
  assert.equal(record.toolName, 'time_convert_time');
  assert.equal(record.output.time_difference, '+8.0h');
  assert.match(record.output.target.datetime, /T17:30:00\+09:00$/);
});

test('listTools shows where the MCP tools come from', async () => {
  const tools = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.equal(byName.time_get_current_time.origin, 'mcp:time');
  assert.equal(byName.f_echo.origin, 'mcp:f');
  assert.equal(byName.echo.origin, '');
});

test("an MCP tool's progress arrives as tool_call_progress events between its start and record", async () => {
  const llm = script(callTurn('', ['p1', 'f_spam_progress', { count: 3 }]), { content: 'done' });
  const events = await collect(client.streamToolLoop({ prompt: 'go', llm }));

  const kinds = events.map((e) => e.payload);
  const started = kinds.indexOf('toolCallStarted');
  assert.deepEqual(kinds.slice(started, started + 5), [
    'toolCallStarted', 'toolCallProgress', 'toolCallProgress', 'toolCallProgress', 'toolCallCompleted',
  ]);
  const progress = events.filter((e) => e.payload === 'toolCallProgress').map((e) => e.toolCallProgress);
  assert.deepEqual(progress[2], {
    callId: 'p1', toolName: 'f_spam_progress', progress: 3, total: 3, message: 'step 3', iteration: 1,
  });
});
