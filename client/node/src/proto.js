// Loading the service definition from the repository's protos/ at run time (no codegen step).
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

const here = path.dirname(fileURLToPath(import.meta.url));

/**
 * Where the service definition is read from: the package's own `protos/` once installed from
 * a tarball (`npm pack` copies them in), else the repository's (this file is
 * `client/node/src/proto.js`), so the client runs from a clone with no build step.
 */
export const DEFAULT_PROTOS_DIR = existsSync(path.join(here, '../protos'))
  ? path.resolve(here, '../protos')
  : path.resolve(here, '../../../protos');

export const SERVICE_PROTO = 'cleveragents/toolruntime/v1/service.proto';

/**
 * How the wire messages look in JavaScript (`stub` hands them out as they are; the client's
 * API converts them, camelCase, in codec.js):
 * - `keepCase`: field names exactly as in the .proto files (snake_case), so the proto comments
 *   document every wire object;
 * - `longs: Number`: the 64-bit fields (`sequence`, `after_sequence`, token counts, timestamp
 *   seconds) are plain numbers; they are exact up to 2^53, far beyond any real value here;
 * - `enums: String`: enum values by their proto names (`"STOP_REASON_FINAL_ANSWER"`);
 * - `defaults: true`: unset scalars read as their zero value, unset messages as `null`, and
 *   unset repeated fields as `[]` (so a streamed response whose one event came in `event`
 *   has `events: []`: see `wireEvents` in codec.js);
 * - `oneofs: true`: each oneof gets a discriminator property (`event.payload`, `kind`).
 */
export const LOADER_OPTIONS = Object.freeze({
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
});

const cache = new Map();

/**
 * The `ToolRuntimeService` client constructor generated from `protosDir`, and the package
 * definition it came from. Loaded once per folder.
 *
 * @param {string} [protosDir]
 * @returns {{Service: typeof grpc.Client & Record<string, any>, definition: protoLoader.PackageDefinition}}
 */
export function loadService(protosDir = DEFAULT_PROTOS_DIR) {
  const dir = path.resolve(protosDir);
  let loaded = cache.get(dir);
  if (!loaded) {
    if (!existsSync(path.join(dir, SERVICE_PROTO))) {
      throw new Error(`cannot find ${SERVICE_PROTO} under ${dir}; pass protosDir`);
    }
    const definition = protoLoader.loadSync(SERVICE_PROTO, {
      ...LOADER_OPTIONS,
      includeDirs: [dir],
    });
    const pkg = /** @type {any} */ (grpc.loadPackageDefinition(definition));
    loaded = { Service: pkg.cleveragents.toolruntime.v1.ToolRuntimeService, definition };
    cache.set(dir, loaded);
  }
  return loaded;
}
