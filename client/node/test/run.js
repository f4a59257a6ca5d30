// `npm test`: start one sidecar, run every test file against it, stop it.
//
// `npm test -- test/a.test.js …` runs those files only; other arguments go to `node --test`
// (`--test-name-pattern=…`). Each file also works alone (`node --test test/session.test.js`, or
// `node test/session.test.js`): it then starts its own sidecar. Every file runs under
// `guard.js` (a bound on each test, no handle left at the end) and `--test-timeout` (a bound on
// each file as a whole), so that a hang fails in minutes, naming the test or the file.
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { SHARED_ADDRESS_ENV, startSidecar } from './sidecar.js';

/** A file's bound: longer than any test's (guard.js), the longest file takes seconds. */
export const FILE_TIMEOUT_MS = 300_000;

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const named = args.filter((arg) => arg.endsWith('.test.js')).map((arg) => path.resolve(arg));
const flags = args.filter((arg) => !arg.endsWith('.test.js'));
const files = named.length
  ? named
  : readdirSync(here)
      .filter((name) => name.endsWith('.test.js'))
      .sort()
      .map((name) => path.join(here, name));

const sidecar = await startSidecar();
const child = spawn(
  process.execPath,
  [
    '--test',
    '--test-concurrency=1',
    `--test-timeout=${FILE_TIMEOUT_MS}`,
    '--import',
    pathToFileURL(path.join(here, 'guard.js')).href,
    ...flags,
    ...files,
  ],
  {
    stdio: 'inherit',
    env: { ...process.env, [SHARED_ADDRESS_ENV]: sidecar.address },
  },
);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => child.kill(signal));
}
const code = await new Promise((resolve) =>
  child.once('exit', (status, signal) => resolve(status ?? (signal ? 1 : 0))),
);
await sidecar.stop();
const problems = sidecar.stderr().trim();
if (code !== 0 && problems) console.error(`\nthe sidecar's own log (warnings and errors):\n${problems}`);
process.exitCode = code;
