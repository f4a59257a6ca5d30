// @cleveragents/sidecar-client: the Node.js client of the cleveragents tool-runtime sidecar.
export { SidecarClient, RESULT_TRAILER } from './client.js';
export { SessionRun } from './session.js';
export { SidecarError, RunFailedError, ToolError, Status, statusName } from './errors.js';
export { TERMINAL } from './codec.js';
export { normaliseOutput } from './tools.js';
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

// The types a TypeScript user names (`import type { RunEvent } from '@cleveragents/sidecar-client'`).
/** @typedef {import('./values.js').RunEvent} RunEvent */
/** @typedef {import('./values.js').Payload} Payload */
/** @typedef {import('./values.js').LlmDelta} LlmDelta */
/** @typedef {import('./values.js').ToolCallRecord} ToolCallRecord */
/** @typedef {import('./values.js').StopReason} StopReason */
/** @typedef {import('./values.js').ErrorKind} ErrorKind */
/** @typedef {import('./values.js').RunState} RunState */
/** @typedef {import('./values.js').Role} Role */
/** @typedef {import('./values.js').RunSpecInput} RunSpecInput */
/** @typedef {import('./values.js').ToolCallRunResult} ToolCallRunResult */
/** @typedef {import('./values.js').ToolSpec} ToolSpec */
/** @typedef {import('./values.js').ApprovalRequest} ApprovalRequest */
/** @typedef {import('./approvals.js').ApprovalAnswer} ApprovalAnswer */
/** @typedef {import('./approvals.js').Approver} Approver */
/** @typedef {import('./hosted_llm.js').LlmRequest} LlmRequest */
/** @typedef {import('./hosted_llm.js').LlmMessage} LlmMessage */
/** @typedef {import('./hosted_llm.js').LlmResponse} LlmResponse */
/** @typedef {import('./llm_stream.js').LlmDeltaInput} LlmDeltaInput */
/** @typedef {import('./client.js').ClientOptions} ClientOptions */
/** @typedef {import('./client.js').CallOptions} CallOptions */
