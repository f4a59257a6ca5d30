// A session's approver: this process decides the run's tool calls that wait for approval.
import { describeError } from './errors.js';
import { withLegacyNames } from './names.js';

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
export async function decide(approver, runId, asked, inflight) {
  const { callId: call_id, toolName, inputs, iteration, reason } = asked;
  const controller = new AbortController();
  inflight.add(controller);
  let decision;
  try {
    const answer = await approver(
      withLegacyNames({ runId, callId: call_id, toolName, inputs, iteration, reason, signal: controller.signal }),
    );
    decision =
      answer !== null && typeof answer === 'object'
        ? { call_id, approved: answer.approved === true, reason: String(answer.reason ?? '') }
        : { call_id, approved: answer === true, reason: '' };
  } catch (err) {
    decision = { call_id, approved: false, reason: `the approver failed: ${describeError(err)}` };
  } finally {
    inflight.delete(controller);
  }
  return { approval_decision: decision };
}
