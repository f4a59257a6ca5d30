// `npm pack` (prepack/postpack): copy the repository's protos/ into the package, and remove
// the copy afterwards. The client reads its service definition from them at run time; in a
// clone it reads the repository's own, so nothing needs copying there.
import { cpSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const copy = path.resolve(here, '../protos');
const action = process.argv[2];
if (action === 'copy') {
  rmSync(copy, { recursive: true, force: true });
  cpSync(path.resolve(here, '../../../protos'), copy, {
    recursive: true,
    filter: (source) => !source.endsWith('.yaml'), // buf's configuration is not the package's
  });
} else if (action === 'remove') {
  rmSync(copy, { recursive: true, force: true });
} else {
  throw new Error(`usage: node scripts/protos.js copy|remove (not ${action})`);
}
