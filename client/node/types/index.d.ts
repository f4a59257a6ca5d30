/**
 * A client for the sidecar at `target` (`host:port` or `unix:/path`).
 *
 * @param {string} target
 * @param {import('./client.js').ClientOptions} [options]
 */
export function connect(target: string, options?: import("./client.js").ClientOptions): SidecarClient;
export { SessionRun } from "./session.js";
import { SidecarClient } from './client.js';
export { SidecarClient, RESULT_TRAILER } from "./client.js";
export { SidecarError, RunFailedError, ToolError, Status, statusName } from "./errors.js";
export { TERMINAL, normaliseOutput } from "./codec.js";
export { DEFAULT_PROTOS_DIR, LOADER_OPTIONS, loadService } from "./proto.js";
