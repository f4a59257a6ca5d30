// Protobuf's time types (`Timestamp`, `Duration`) and their JavaScript counterparts.

/** `Timestamp` → `Date` (millisecond precision), unset → `null`. */
export function fromTimestamp(ts) {
  if (!ts) return null;
  return new Date(Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1e6));
}

/** `Date` or epoch milliseconds → `Timestamp`. */
export function toTimestamp(value) {
  if (value === null || value === undefined) return null;
  const ms = value instanceof Date ? value.getTime() : Number(value);
  const seconds = Math.floor(ms / 1000);
  return { seconds, nanos: Math.round((ms - seconds * 1000) * 1e6) };
}

/** `Duration` → milliseconds, unset → `null`. */
export function fromDuration(d) {
  if (!d) return null;
  return Number(d.seconds) * 1000 + d.nanos / 1e6;
}

/** Milliseconds → `Duration`. */
export function toDuration(ms) {
  const seconds = Math.floor(ms / 1000);
  return { seconds, nanos: Math.round((ms - seconds * 1000) * 1e6) };
}
