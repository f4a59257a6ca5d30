// Run one test file many times, several copies at once, and count how its runs end: an exit
// with 0, a failure (another code), or a hang (still running after the bound, then killed).
// For flakes and hangs that show only under load (issue 36: restart.test.js passed, then never
// exited, about 1 run in 12 to 24 with four copies at once).
//
//   node test/tools/repeat.js [--runs=50] [--parallel=4] [--bound-s=180] test/restart.test.js
//
// Each run is `node <file>` (the file starts its own sidecar and runs under guard.js). The
// output of every run that did not exit with 0 is kept in a temporary directory, named below.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const options = { runs: 50, parallel: 4, 'bound-s': 180 };
const files = [];
for (const arg of process.argv.slice(2)) {
  const match = /^--([a-z-]+)=(\d+)$/.exec(arg);
  if (match && match[1] in options) options[match[1]] = Number(match[2]);
  else if (arg.endsWith('.js')) files.push(path.resolve(arg));
  else throw new Error(`unknown argument ${arg}`);
}
if (files.length !== 1) throw new Error('name one test file');
const [file] = files;
const keep = mkdtempSync(path.join(os.tmpdir(), 'repeat-'));

/** Run the file once; how it ended and its output. */
function once(n) {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let output = '';
    for (const stream of [child.stdout, child.stderr]) {
      stream.setEncoding('utf8');
      stream.on('data', (chunk) => {
        output += chunk;
      });
    }
    let hung = false;
    const timer = setTimeout(() => {
      hung = true;
      output += `\n[repeat] still running after ${options['bound-s']} s (pid ${child.pid}): killed\n`;
      try {
        process.kill(-child.pid, 'SIGKILL'); // its process group: the run and its sidecars
      } catch {
        child.kill('SIGKILL');
      }
    }, options['bound-s'] * 1000);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      const outcome = hung ? 'hang' : code === 0 ? 'exit' : 'fail';
      if (outcome !== 'exit') writeFileSync(path.join(keep, `run-${n}-${outcome}.log`), output);
      resolve({ n, outcome, code: code ?? signal, seconds: (Date.now() - started) / 1000 });
    });
  });
}

const counts = { exit: 0, fail: 0, hang: 0 };
const seconds = [];
let next = 0;
async function worker() {
  while (next < options.runs) {
    const result = await once(++next);
    counts[result.outcome] += 1;
    seconds.push(result.seconds);
    if (result.outcome !== 'exit') {
      console.log(`run ${result.n}: ${result.outcome} (${result.code}) after ${result.seconds.toFixed(1)} s`);
    }
  }
}
await Promise.all(Array.from({ length: options.parallel }, worker));
seconds.sort((a, b) => a - b);
console.log(
  `${path.basename(file)}: ${options.runs} runs, ${options.parallel} at once: ` +
    `${counts.exit} exited 0, ${counts.fail} failed, ${counts.hang} hung ` +
    `(median ${seconds[seconds.length >> 1].toFixed(1)} s, longest ${seconds.at(-1).toFixed(1)} s)` +
    (counts.exit === options.runs ? '' : `; their output: ${keep}`),
);
process.exitCode = counts.exit === options.runs ? 0 : 1;
