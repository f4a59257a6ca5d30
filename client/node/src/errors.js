// Errors: a non-OK gRPC status, and a run that failed (with its partial result).
import grpc from '@grpc/grpc-js';

/** gRPC status code numbers by name (`Status.NOT_FOUND === 5`). */
export const Status = grpc.status;

const NAMES = Object.fromEntries(
  Object.entries(grpc.status)
    .filter(([, v]) => typeof v === 'number')
    .map(([k, v]) => [v, k]),
);

/** The name of a status code number (`5` → `"NOT_FOUND"`). */
export function statusName(code) {
  return NAMES[code] ?? `UNKNOWN_CODE_${code}`;
}

/** A call ended with a non-OK gRPC status. */
export class SidecarError extends Error {
  /**
   * @param {number} code  the gRPC status code number (see `Status`)
   * @param {string} details  the server's message
   * @param {import('@grpc/grpc-js').Metadata | null} [metadata]  trailing metadata
   */
  constructor(code, details, metadata = null) {
    super(`${statusName(code)}: ${details}`);
    this.name = 'SidecarError';
    this.code = code;
    this.codeName = statusName(code);
    this.details = details;
    this.metadata = metadata;
    /** @type {import('./values.js').ToolCallRunResult | null} a run's partial result, if known */
    this.result = null;
  }
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
  constructor(code, details, result, metadata = null) {
    super(code, details, metadata);
    this.name = 'RunFailedError';
    this.result = result;
  }
}

/**
 * Thrown by a tool to fail its call with exactly this message. Any other error fails the
 * call with `"<name>: <message>"` (`"TypeError: x is not a function"`).
 */
export class ToolError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ToolError';
  }
}

/** The text a failed tool call records for a thrown value. */
export function describeError(err) {
  if (err instanceof ToolError) return err.message;
  if (err instanceof Error) return err.message ? `${err.name}: ${err.message}` : err.name;
  return String(err);
}

/** A grpc-js error (or anything thrown around a call) as a `SidecarError`. */
export function toSidecarError(err) {
  if (err instanceof SidecarError) return err;
  if (err && typeof err.code === 'number' && 'details' in err) {
    return new SidecarError(err.code, err.details, err.metadata ?? null);
  }
  return err;
}
