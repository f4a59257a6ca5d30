// The committed declarations (types/*.d.ts) are what `tsc` generates from the JSDoc now.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const TSC = path.join(PACKAGE_DIR, 'node_modules/typescript/bin/tsc');

test('types/ is up to date with the JSDoc of src/ (run `npm run types` after changing it)', async () => {
  const out = mkdtempSync(path.join(os.tmpdir(), 'node-types-'));
  try {
    await promisify(execFile)(process.execPath, [TSC, '-p', 'tsconfig.json', '--declarationDir', out], {
      cwd: PACKAGE_DIR, timeout: 60_000,
    });
    const committed = path.join(PACKAGE_DIR, 'types');
    assert.deepEqual(readdirSync(out).sort(), readdirSync(committed).sort());
    for (const name of readdirSync(out)) {
      assert.equal(
        readFileSync(path.join(out, name), 'utf8'),
        readFileSync(path.join(committed, name), 'utf8'),
        `types/${name} is stale: run 'npm run types'`,
      );
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
