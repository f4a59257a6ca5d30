/**
 * A client for the sidecar at `target` (`host:port` or `unix:/path`).
 *
 * @param {string} target
 * @param {import('./client.js').ClientOptions} [options]
 */
export function connect(target: string, options?: import("./client.js").ClientOptions): SidecarClient;
export { SessionRun } from "./session.js";
export { TERMINAL } from "./codec.js";
export { normaliseOutput } from "./tools.js";
export type RunEvent = import("./values.js").RunEvent;
export type Payload = import("./values.js").Payload;
export type LlmDelta = import("./values.js").LlmDelta;
export type ToolCallRecord = import("./values.js").ToolCallRecord;
export type StopReason = import("./values.js").StopReason;
export type ErrorKind = import("./values.js").ErrorKind;
export type RunState = import("./values.js").RunState;
export type Role = import("./values.js").Role;
export type RunSpecInput = import("./values.js").RunSpecInput;
export type ToolCallRunResult = import("./values.js").ToolCallRunResult;
export type ToolSpec = import("./values.js").ToolSpec;
export type ApprovalRequest = import("./values.js").ApprovalRequest;
export type ApprovalAnswer = import("./approvals.js").ApprovalAnswer;
export type Approver = import("./approvals.js").Approver;
export type LlmRequest = import("./hosted_llm.js").LlmRequest;
export type LlmMessage = import("./hosted_llm.js").LlmMessage;
export type LlmResponse = import("./hosted_llm.js").LlmResponse;
export type LlmDeltaInput = import("./llm_stream.js").LlmDeltaInput;
export type ClientOptions = import("./client.js").ClientOptions;
export type CallOptions = import("./client.js").CallOptions;
import { SidecarClient } from './client.js';
export { SidecarClient, RESULT_TRAILER } from "./client.js";
export { SidecarError, RunFailedError, ToolError, Status, statusName } from "./errors.js";
export { DEFAULT_PROTOS_DIR, LOADER_OPTIONS, loadService } from "./proto.js";
