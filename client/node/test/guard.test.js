// guard.js, which every test file runs under, turns a hang into a failure that names it: a test
// that does not end, a process that does not end after its tests, a handle left at the exit.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { EXIT_GRACE_ENV, TEST_TIMEOUT_ENV } from './guard.js';
import { WAIT_MS, within } from './sidecar.js';

const here = path.dirname(fileURLToPath(import.meta.url));

/** Run `fixtures/<name>.js` the way run.js runs a test file; its exit code and its output. */
async function runFixture(name) {
  const env = { ...process.env, [TEST_TIMEOUT_ENV]: '1000', [EXIT_GRACE_ENV]: '1000' };
  delete env.NODE_TEST_CONTEXT; // this file's own runner's: the fixture gets a runner of its own
  const child = spawn(
    process.execPath,
    [
      '--test',
      '--test-timeout=120000',
      '--import',
      pathToFileURL(path.join(here, 'guard.js')).href,
      path.join(here, 'fixtures', `${name}.js`),
    ],
    { env, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  for (const stream of [child.stdout, child.stderr]) {
    stream.setEncoding('utf8');
    stream.on('data', (chunk) => {
      output += chunk;
    });
  }
  const code = await within(
    new Promise((resolve) => child.once('close', resolve)),
    WAIT_MS,
    `the end of the fixture ${name}`,
  ).finally(() => child.kill('SIGKILL'));
  return { code, output };
}

test('a file that closes what it opens passes', async () => {
  const { code, output } = await runFixture('clean');
  assert.equal(code, 0, output);
});

test('a test that never ends fails its file, named, with what the process holds', async () => {
  const { code, output } = await runFixture('hangs');
  assert.equal(code, 1, output);
  assert.match(output, /the test 'waits for ever' did not end within 1000 ms/);
  assert.match(output, /the process holds: Timeout/);
});

test('a file whose process stays up after its tests fails, naming what holds it', async () => {
  const { code, output } = await runFixture('leaves_a_server');
  assert.equal(code, 1, output);
  assert.match(output, /leaves_a_server\.js: its tests ended \d+ ms ago but its process is still running/);
  assert.match(output, /held by: TCPServerWrap/);
});

test('a handle Node cannot close fails its file at exit instead of spinning there', async () => {
  const { code, output } = await runFixture('leaves_an_unclosable_socket');
  assert.equal(code, 1, output);
  assert.match(output, /its process left handles open at its end: TCPSocketWrap/);
});
