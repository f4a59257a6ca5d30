/** The name of a status code number (`5` → `"NOT_FOUND"`). */
export function statusName(code: any): string;
/** The text a failed tool call records for a thrown value. */
export function describeError(err: any): string;
/** A grpc-js error (or anything thrown around a call) as a `SidecarError`. */
export function toSidecarError(err: any): any;
/** gRPC status code numbers by name (`Status.NOT_FOUND === 5`). */
export const Status: typeof grpc.status;
/** A call ended with a non-OK gRPC status. */
export class SidecarError extends Error {
    /**
     * @param {number} code  the gRPC status code number (see `Status`)
     * @param {string} details  the server's message
     * @param {import('@grpc/grpc-js').Metadata | null} [metadata]  trailing metadata
     */
    constructor(code: number, details: string, metadata?: import("@grpc/grpc-js").Metadata | null);
    code: number;
    codeName: string;
    details: string;
    metadata: grpc.Metadata | null;
    /** @type {import('./values.js').ToolCallRunResult | null} a run's partial result, if known */
    result: import("./values.js").ToolCallRunResult | null;
}
/**
 * A run that ended with `run_failed` (its LLM failed, say). `code` is the status of the
 * failure (`UNAVAILABLE` for an LLM error) and `result` the partial result
 * (`STOP_REASON_ERROR`), when the sidecar sent it.
 */
export class RunFailedError extends SidecarError {
    /**
     * @param {number} code
     * @param {string} details
     * @param {import('./values.js').ToolCallRunResult | null} result
     * @param {import('@grpc/grpc-js').Metadata | null} [metadata]
     */
    constructor(code: number, details: string, result: import("./values.js").ToolCallRunResult | null, metadata?: import("@grpc/grpc-js").Metadata | null);
}
/**
 * Thrown by a tool to fail its call with exactly this message. Any other error fails the
 * call with `"<name>: <message>"` (`"TypeError: x is not a function"`).
 */
export class ToolError extends Error {
    constructor(message: any);
}
import grpc from '@grpc/grpc-js';
