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
    return new SidecarError(err.code, explained(err.code, err.details), err.metadata ?? null);
  }
  return err;
}

// gRPC's own refusals of a message over a limit: the sidecar's (SERVER:), or this client's.
const SERVER_TOO_LARGE = /SERVER: Received message larger than max \((\d+) vs\. (\d+)\)/;
const RECEIVED_TOO_LARGE = /^Received message larger than max \((\d+) vs\.? (\d+)\)/;
const SENT_TOO_LARGE = /^Attempted to send message with a size larger than (\d+)/;

/** `details`, with gRPC's bare "larger than max" told as the limit to raise. */
function explained(code, details) {
  if (code !== grpc.status.RESOURCE_EXHAUSTED || typeof details !== 'string') return details;
  let match;
  if ((match = SERVER_TOO_LARGE.exec(details))) {
    return (
      `the request is ${match[1]} bytes, more than the sidecar's max_message_bytes (${match[2]}): ` +
      "send less (a shorter prompt, context or tool list), or have the sidecar's operator raise " +
      `max_message_bytes [gRPC: ${details}]`
    );
  }
  if ((match = RECEIVED_TOO_LARGE.exec(details))) {
    return (
      `a message from the sidecar is ${match[1]} bytes, more than this client accepts (${match[2]}): ` +
      "raise channelOptions['grpc.max_receive_message_length'] to the sidecar's max_message_bytes " +
      `[gRPC: ${details}]`
    );
  }
  if ((match = SENT_TOO_LARGE.exec(details))) {
    return (
      `the request is more than this client sends (${match[1]} bytes): send less, or raise ` +
      "channelOptions['grpc.max_send_message_length'] (and the sidecar's max_message_bytes) " +
      `[gRPC: ${details}]`
    );
  }
  return details;
}
