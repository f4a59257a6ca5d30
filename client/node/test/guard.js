// The guard every test file's process runs under: `test/run.js` loads it with `--import`, and
// `sidecar.js` imports it, so that a file run alone has it too. It turns two hangs into failures
// that name their cause:
//
// - a test still running TEST_TIMEOUT_MS after it began ends its file's process, naming the test
//   and what the process holds (Node 20 applies `--test-timeout` to each file as a whole, never
//   to the tests inside it);
// - a process that, once its tests and after-hooks are done, still holds a handle besides its
//   stdio fails, naming the handles: a program must exit once it has closed its clients,
//   servers and sockets. This catches both a handle left open (the process would never end) and
//   one Node cannot close (issue 36: exit then spins for ever in Node's handle cleanup).
import { writeSync } from 'node:fs';
import { after, afterEach, beforeEach } from 'node:test';

/** Overrides the per-test bound, in milliseconds (the guard's own tests shorten it). */
export const TEST_TIMEOUT_ENV = 'CLEVERAGENTS_TEST_TIMEOUT_MS';
/** Overrides how long a file's process may live on once its tests have ended. */
export const EXIT_GRACE_ENV = 'CLEVERAGENTS_TEST_EXIT_GRACE_MS';

/** A test's bound: its file fails when one test runs this long (the longest take seconds). */
export const TEST_TIMEOUT_MS = Number(process.env[TEST_TIMEOUT_ENV]) || 120_000;
/** How long after its last test a file's process may run on (after-hooks stop sidecars). */
export const EXIT_GRACE_MS = Number(process.env[EXIT_GRACE_ENV]) || 60_000;

/** What `getActiveResourcesInfo()` lists in `now` beyond `before` (both lists of type names). */
export function beyond(now, before) {
  const left = [...before];
  return now.filter((name) => {
    const i = left.indexOf(name);
    if (i === -1) return true;
    left.splice(i, 1);
    return false;
  });
}

/** Say `message` on stderr, synchronously (the process is about to end), and exit with 1. */
function fail(message) {
  writeSync(2, `\n${message}\n`);
  process.exit(1);
}

/** A test file's own process: one `node --test` started, or a `.test.js` file run by `node`. */
function isTestFileProcess() {
  if (process.env.NODE_TEST_CONTEXT?.startsWith('child')) return true;
  return !process.execArgv.includes('--test') && /\.test\.js$/.test(process.argv[1] ?? '');
}

if (isTestFileProcess()) {
  const file = process.argv[1];
  // The stdio streams are handles of the process's own, open until it ends.
  void process.stdout;
  void process.stderr;
  const baseline = process.getActiveResourcesInfo();
  const held = () => beyond(process.getActiveResourcesInfo(), baseline).join(', ') || 'nothing';

  const timers = new Map();
  beforeEach((t) => {
    const timer = setTimeout(() => {
      fail(
        `${file}: the test '${t.name}' did not end within ${TEST_TIMEOUT_MS} ms` +
          ` (${TEST_TIMEOUT_ENV}); the process holds: ${held()}`,
      );
    }, TEST_TIMEOUT_MS);
    timer.unref(); // a bound, not a reason to stay alive
    timers.set(t, timer);
  });
  afterEach((t) => {
    clearTimeout(timers.get(t));
    timers.delete(t);
  });

  // Root after-hooks run in the order they were registered: this one, the first, runs before the
  // file's own (which close what the file opened), so it only starts the grace period.
  after(() => {
    for (const timer of timers.values()) clearTimeout(timer);
    const ended = Date.now();
    setTimeout(() => {
      fail(
        `${file}: its tests ended ${Date.now() - ended} ms ago but its process is still running` +
          ` (${EXIT_GRACE_ENV}), held by: ${held()}`,
      );
    }, EXIT_GRACE_MS).unref();
  });

  // Checked when the process ends on its own (its event loop has nothing left to do), after
  // every other 'exit' listener (the sidecars' orphan guards among them): whatever is still
  // listed then is a handle nobody closed, or one Node cannot close. Exiting from here skips
  // Node's handle cleanup, which would otherwise wait for the latter for ever.
  process.once('beforeExit', () => {
    process.on('exit', () => {
      const left = beyond(process.getActiveResourcesInfo(), baseline);
      if (left.length > 0) {
        fail(`${file}: its process left handles open at its end: ${left.join(', ')}`);
      }
    });
  });
}
