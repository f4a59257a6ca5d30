// The package as published: `npm pack`, installed from the tarball in a fresh project,
// imports and talks to a real sidecar there, and its types check a TypeScript user's code.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { WAIT_MS, useSidecar } from './sidecar.js';

const run = promisify(execFile);
const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const TSC = path.join(PACKAGE_DIR, 'node_modules/typescript/bin/tsc');
const NAME = '@cleveragents/sidecar-client';
/** npm itself, run with this Node.js (`npm` may not be on the PATH node --test gives). */
const NPM = path.join(path.dirname(process.execPath), 'npm');
/** Scripts must run for `npm pack` (its prepack copies the protos in), whatever npm ci said. */
const NPM_ENV = Object.fromEntries(
  Object.entries(process.env).filter(([key]) => !/^npm_config_ignore_scripts$/i.test(key)),
);

let sidecar;
let dir;
let tarball;

before(async () => {
  sidecar = await useSidecar();
  dir = mkdtempSync(path.join(os.tmpdir(), 'node-package-'));
  const { stdout } = await run(NPM, ['pack', '--pack-destination', dir, '--silent'], {
    cwd: PACKAGE_DIR, env: NPM_ENV, timeout: 60_000,
  });
  tarball = path.join(dir, stdout.trim().split('\n').pop());
  const project = path.join(dir, 'app');
  await run('mkdir', [project]);
  writeFileSync(path.join(project, 'package.json'), '{"name": "app", "private": true, "type": "module"}\n');
  await run(NPM, ['install', tarball, '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'], {
    cwd: project, env: NPM_ENV, timeout: 120_000,
  });
});

after(async () => {
  await sidecar?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('the tarball holds the sources, types and protos, and no tests or dependencies', async () => {
  const { stdout } = await run('tar', ['-tzf', tarball]);
  const files = stdout.trim().split('\n').map((f) => f.replace(/^package\//, '')).sort();
  assert.ok(files.includes('src/index.js'));
  assert.ok(files.includes('types/index.d.ts'));
  assert.ok(files.includes('protos/cleveragents/toolruntime/v1/service.proto'));
  assert.deepEqual(files.filter((f) => /^(test|node_modules|scripts|examples)\//.test(f)), []);
  const manifest = JSON.parse(readFileSync(path.join(dir, 'app/node_modules', NAME, 'package.json'), 'utf8'));
  assert.equal(manifest.private, undefined);
  assert.equal(manifest.name, NAME);
});

test('packing leaves no copy of the protos in the package folder', () => {
  assert.ok(!readdirSync(PACKAGE_DIR).includes('protos'));
});

test('the installed copy imports by name, reads its own protos and talks to a sidecar', async () => {
  const project = path.join(dir, 'app');
  const script = [
    `import { SidecarClient, DEFAULT_PROTOS_DIR } from '${NAME}';`,
    'const client = new SidecarClient(process.argv[2]);',
    'const tools = await client.listTools();',
    'client.close();',
    'console.log(JSON.stringify({ protos: DEFAULT_PROTOS_DIR, tools: tools.map((t) => t.name) }));',
  ].join('\n');
  writeFileSync(path.join(project, 'main.js'), script);
  const { stdout } = await run(process.execPath, ['main.js', sidecar.address], { cwd: project, timeout: WAIT_MS });
  const { protos, tools } = JSON.parse(stdout);
  assert.equal(protos, path.join(project, 'node_modules', NAME, 'protos'));
  assert.ok(tools.includes('echo'));
});

test("the installed package's types check a TypeScript user's code", async () => {
  const project = path.join(dir, 'app');
  writeFileSync(path.join(project, 'usage.ts'), readFileSync(path.join(PACKAGE_DIR, 'test/types/usage.ts')));
  const config = {
    compilerOptions: {
      strict: true, noEmit: true, module: 'NodeNext', moduleResolution: 'NodeNext', target: 'ES2022',
      lib: ['ES2023'], types: ['node'], typeRoots: [path.join(PACKAGE_DIR, 'node_modules/@types')],
      skipLibCheck: true,
    },
    files: ['usage.ts'],
  };
  writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify(config));
  try {
    await run(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: project, timeout: 60_000 });
  } catch (err) {
    assert.fail(`tsc found errors in test/types/usage.ts:\n${err.stdout}`);
  }
});

test('a type error in user code is reported against the packed types', async () => {
  const project = path.join(dir, 'app');
  writeFileSync(path.join(project, 'usage.ts'), `import { connect } from '${NAME}';\nconnect(42);\n`);
  await assert.rejects(
    run(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: project, timeout: 60_000 }),
    (err) => /not assignable to parameter of type 'string'/.test(err.stdout),
  );
});
