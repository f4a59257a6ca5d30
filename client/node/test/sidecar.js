// Starts a real sidecar (the repository's Python one, scripted profile) for the tests.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import './guard.js'; // a file run alone (`node test/x.test.js`) is guarded too

/**
 * The bound of the tests' waits for an event (a sidecar's start, a run's end): generous, as
 * these machines are loaded; a wait that passes takes only as long as its event.
 */
export const WAIT_MS = 60_000;

/** The tools a default sidecar serves: the built-ins, then the sandboxed file tools. */
export const SERVER_TOOLS = ['echo', 'sleep', 'read_file', 'write_file', 'edit_file', 'list_dir', 'search_files', 'make_dir'];

/** The repository root: this file is `client/node/test/sidecar.js`. */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const SIDECAR_BIN = path.join(REPO_ROOT, '.venv/bin/cleveragents-sidecar');

/**
 * Start `cleveragents-sidecar serve` on a free port and wait for its "listening" line.
 *
 * @param {string[]} [args]  extra command-line flags
 * @param {Record<string, string>} [extraEnv]  settings as environment variables
 * @returns {Promise<{address: string, stop: () => Promise<void>, kill: () => Promise<void>,
 *   stderr: () => string}>}
 */
export async function startSidecar(args = [], extraEnv = {}) {
  if (!existsSync(SIDECAR_BIN)) {
    throw new Error(`${SIDECAR_BIN} is missing: run 'make install' at the repository root first`);
  }
  // Runs may use sandbox roots under the temporary directory only (a sidecar allows none
  // unless its operator says so).
  const env = { CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS: realpathSync(os.tmpdir()), ...process.env, ...extraEnv };
  const child = spawn(SIDECAR_BIN, ['serve', '--listen', '127.0.0.1:0', '--log-level', 'warning', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env,
  });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  // Should this process end without stopping it (a crash, Ctrl-C), take the sidecar along.
  const orphanGuard = () => child.kill('SIGKILL');
  process.once('exit', orphanGuard);
  const lines = createInterface({ input: child.stdout });
  let timer;
  let match;
  try {
    const first = await Promise.race([
      new Promise((resolve) => lines.once('line', resolve)),
      exited.then(({ code, signal }) => {
        throw new Error(`the sidecar exited (${code ?? signal}) before listening:\n${stderr}`);
      }),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the sidecar did not start in ${WAIT_MS} ms:\n${stderr}`)), WAIT_MS);
      }),
    ]);
    match = /^cleveragents-sidecar listening on (\S+)$/.exec(first);
    if (!match) throw new Error(`unexpected first line from the sidecar: ${first}`);
  } catch (err) {
    // A sidecar that did not come up is not left running, holding this process up.
    process.off('exit', orphanGuard);
    child.kill('SIGKILL');
    await exited;
    throw err;
  } finally {
    clearTimeout(timer);
    lines.close();
  }
  return {
    address: match[1],
    stderr: () => stderr,
    /** `kill -9`: no shutdown, no flush (a crash). */
    async kill() {
      process.off('exit', orphanGuard);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
    async stop() {
      process.off('exit', orphanGuard);
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(timer);
      }
    },
  };
}

/**
 * A sidecar whose LLM fails the way a real one does: its default profile is an OpenAI one (no
 * retries) at a loopback server that answers the first call of a run with `content` and one
 * `echo` call, and every later call with 503 "the model is overloaded" (so: UNAVAILABLE).
 *
 * @param {string} content  the text of the one answered turn
 * @param {object} echoArgs  the arguments of its echo call
 */
export async function startFailingSidecar(content = 'one turn only', echoArgs = { text: 'kept' }) {
  const http = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => {
      body += chunk;
    });
    req.on('end', () => {
      const called = JSON.parse(body).messages.some((m) => m.role === 'tool');
      const reply = called
        ? { error: { message: 'the model is overloaded', type: 'overloaded' } }
        : {
            id: 'x',
            object: 'chat.completion',
            choices: [
              {
                index: 0,
                finish_reason: 'tool_calls',
                message: {
                  role: 'assistant',
                  content,
                  tool_calls: [
                    {
                      id: 'c',
                      type: 'function',
                      function: { name: 'echo', arguments: JSON.stringify(echoArgs) },
                    },
                  ],
                },
              },
            ],
            usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
          };
      res.writeHead(called ? 503 : 200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(reply));
    });
  });
  await new Promise((resolve) => http.listen(0, '127.0.0.1', resolve));
  const dir = mkdtempSync(path.join(os.tmpdir(), 'failing-llm-'));
  const config = path.join(dir, 'sidecar.toml');
  writeFileSync(
    config,
    [
      'default_profile = "failing"',
      '[profiles.failing]',
      'kind = "openai"',
      'model = "m"',
      `base_url = "http://127.0.0.1:${http.address().port}/v1"`,
      'api_key_env = ""',
      'max_retries = 0',
      '',
    ].join('\n'),
  );
  const sidecar = await startSidecar(['--config', config]);
  return {
    ...sidecar,
    async stop() {
      await sidecar.stop();
      http.closeAllConnections();
      await new Promise((resolve) => http.close(resolve));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Set by `test/run.js` (what `npm test` runs): the address of a sidecar shared by all files. */
export const SHARED_ADDRESS_ENV = 'CLEVERAGENTS_TEST_SIDECAR';

/**
 * The sidecar for one test file: the shared one when `npm test` started it, else a sidecar of
 * the file's own (so that `node --test test/x.test.js` works alone).
 */
export async function useSidecar() {
  const shared = process.env[SHARED_ADDRESS_ENV];
  if (shared) return { address: shared, stderr: () => '', stop: async () => {} };
  return startSidecar();
}

/** A `RunSpec.llm` whose scripted LLM plays `turns`. */
export function script(...turns) {
  return { script: turns };
}

/** A scripted turn that calls tools: `calls` are `[id, name, arguments]`. */
export function callTurn(content, ...calls) {
  return { content, tool_calls: calls.map(([id, name, args]) => ({ id, name, arguments: args })) };
}

/** Collect every event of a stream. */
export async function collect(stream) {
  const events = [];
  for await (const event of stream) events.push(event);
  return events;
}

const TERMINALS = ['runCompleted', 'runFailed', 'runCancelled'];

/**
 * Assert the invariants of one run's event log (API.md): sequences 1, 2, 3… without gaps, one
 * run id, `run_started` first, exactly one terminal event and it is last, each tool call
 * started before it completed, and each iteration's LLM answer after its start.
 */
export function assertEventLog(assert, events, { from = 1 } = {}) {
  assert.ok(events.length > 0, 'no events');
  assert.deepEqual(
    events.map((e) => e.sequence),
    events.map((_, i) => from + i),
    'sequences are consecutive',
  );
  assert.equal(new Set(events.map((e) => e.runId)).size, 1, 'one run id');
  if (from === 1) assert.equal(events[0].payload, 'runStarted');
  const terminals = events.filter((e) => TERMINALS.includes(e.payload));
  assert.equal(terminals.length, 1, 'exactly one terminal event');
  assert.equal(events.at(-1), terminals[0], 'the terminal event is last');
  const started = new Set();
  const iterations = new Set();
  for (const event of events) {
    if (event.payload === 'toolCallStarted') started.add(event.toolCallStarted.callId);
    if (event.payload === 'toolCallCompleted' && from === 1) {
      assert.ok(started.has(event.toolCallCompleted.record.callId), 'started before completed');
    }
    if (event.payload === 'iterationStarted') iterations.add(event.iterationStarted.iteration);
    if (event.payload === 'llmResponded' && from === 1) {
      assert.ok(iterations.has(event.llmResponded.iteration), 'iteration started before its answer');
    }
    assert.ok(event.time instanceof Date, 'time is a Date');
  }
}

/** Poll `getRun` until the run has ended; returns its info. */
export async function waitForEnd(client, runId, timeoutMs = WAIT_MS) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const info = await client.getRun(runId);
    if (info.state !== 'RUN_STATE_RUNNING') return info;
    if (Date.now() > until) throw new Error(`run ${runId} still running after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Wait until `predicate()` is true. */
export async function until(predicate, timeoutMs = WAIT_MS) {
  const limit = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > limit) throw new Error('timed out waiting for a condition');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

let counter = 0;
/** A run id unique within the test process. */
export function runId(prefix = 'js') {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}-${Date.now().toString(36)}`;
}

/** `promise`, or a rejection saying `what` did not happen within `ms` (a bound, not a sync). */
export async function within(promise, ms, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A promise and the function that resolves it. */
export function signalled() {
  let resolve;
  const promise = new Promise((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
