/**
 * @typedef {boolean | {approved: boolean, reason?: string}} ApprovalAnswer  an approver's
 *   decision: `true`/`false`, or an object with a reason (the model sees a denial's reason)
 */
/**
 * @typedef {(request: import('./values.js').ApprovalRequest & {runId: string, signal: AbortSignal})
 *   => ApprovalAnswer | Promise<ApprovalAnswer>} Approver  decides this session's approval
 *   requests; `signal` aborts when the session ends. Anything but `true` or an object with
 *   `approved: true` denies, and so does an approver that throws (saying why).
 */
/**
 * @internal
 * Ask `approver` about `asked` (an `approvalRequested` event's data, of run `runId`) and
 * return the `approval_decision` message to send. Its signal aborts with every controller in
 * `inflight` when the session ends.
 *
 * @param {Approver} approver
 * @param {string} runId
 * @param {any} asked
 * @param {Set<AbortController>} inflight
 */
export function decide(approver: Approver, runId: string, asked: any, inflight: Set<AbortController>): Promise<{
    approval_decision: {
        call_id: any;
        approved: boolean;
        reason: string;
    };
}>;
/**
 * an approver's
 *   decision: `true`/`false`, or an object with a reason (the model sees a denial's reason)
 */
export type ApprovalAnswer = boolean | {
    approved: boolean;
    reason?: string;
};
/**
 * decides this session's approval
 *   requests; `signal` aborts when the session ends. Anything but `true` or an object with
 *   `approved: true` denies, and so does an approver that throws (saying why).
 */
export type Approver = (request: import("./values.js").ApprovalRequest & {
    runId: string;
    signal: AbortSignal;
}) => ApprovalAnswer | Promise<ApprovalAnswer>;
