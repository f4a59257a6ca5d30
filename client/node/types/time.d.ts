/** `Timestamp` → `Date` (millisecond precision), unset → `null`. */
export function fromTimestamp(ts: any): Date | null;
/** `Date` or epoch milliseconds → `Timestamp`. */
export function toTimestamp(value: any): {
    seconds: number;
    nanos: number;
} | null;
/** `Duration` → milliseconds, unset → `null`. */
export function fromDuration(d: any): number | null;
/** Milliseconds → `Duration`. */
export function toDuration(ms: any): {
    seconds: number;
    nanos: number;
};
