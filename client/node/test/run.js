// `npm test`: start one sidecar, run every test file against it, stop it.
//
// Each file also works alone (`node --test test/session.test.js`): it then starts its own.
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { SHARED_ADDRESS_ENV, startSidecar } from './sidecar.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const files = readdirSync(here)
  .filter((name) => name.endsWith('.test.js'))
  .sort()
  .map((name) => path.join(here, name));

const sidecar = await startSidecar();
const child = spawn(
  process.execPath,
  ['--test', '--test-concurrency=1', ...process.argv.slice(2), ...files],
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
