/**
 * The `ToolRuntimeService` client constructor generated from `protosDir`, and the package
 * definition it came from. Loaded once per folder.
 *
 * @param {string} [protosDir]
 * @returns {{Service: typeof grpc.Client & Record<string, any>, definition: protoLoader.PackageDefinition}}
 */
export function loadService(protosDir?: string): {
    Service: typeof grpc.Client & Record<string, any>;
    definition: protoLoader.PackageDefinition;
};
/**
 * Where the service definition is read from: the package's own `protos/` once installed from
 * a tarball (`npm pack` copies them in), else the repository's (this file is
 * `client/node/src/proto.js`), so the client runs from a clone with no build step.
 */
export const DEFAULT_PROTOS_DIR: string;
export const SERVICE_PROTO: "cleveragents/toolruntime/v1/service.proto";
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
export const LOADER_OPTIONS: Readonly<{
    keepCase: true;
    longs: NumberConstructor;
    enums: StringConstructor;
    defaults: true;
    oneofs: true;
}>;
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';
