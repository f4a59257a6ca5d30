// @cleveragents/sidecar-client: the Node.js client of the cleveragents tool-runtime sidecar.
export { SidecarClient, RESULT_TRAILER } from './client.js';
export { SessionRun } from './session.js';
export { SidecarError, RunFailedError, ToolError, Status, statusName } from './errors.js';
export { TERMINAL, normaliseOutput } from './codec.js';
export { DEFAULT_PROTOS_DIR, LOADER_OPTIONS, loadService } from './proto.js';

import { SidecarClient } from './client.js';

/**
 * A client for the sidecar at `target` (`host:port` or `unix:/path`).
 *
 * @param {string} target
 * @param {import('./client.js').ClientOptions} [options]
 */
export function connect(target, options) {
  return new SidecarClient(target, options);
}
