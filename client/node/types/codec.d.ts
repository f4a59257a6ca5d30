/**
 * The wire `RunEvent`s one streamed response carries, oldest first: those batched in its
 * repeated `events` field, then its single `event`, if set. This reads every response this
 * client streams (`StreamToolLoopResponse`, `WatchRunResponse`, `SessionResponse`), batched
 * or not: an unset repeated field is `[]` (proto-loader's `defaults`), an unset message field
 * `null`, and a `SessionResponse` whose `kind` is not `event` has no `event` key at all.
 * (The sidecar never sets both fields; the order is the one `SessionResponse` documents.)
 *
 * @param {{events?: any[] | null, event?: any}} response
 * @returns {any[]}
 */
export function wireEvents(response: {
    events?: any[] | null;
    event?: any;
}): any[];
/**
 * @typedef {{parse: (text: string) => any, stringify: (value: any) => string | undefined}} Json
 *   How JSON text is read and written. The default is the global `JSON`, which turns integers
 *   beyond 2^53 into approximate numbers; plug in a lossless parser if your tools need them.
 */
/** The payloads that end a run. */
export const TERMINAL: readonly ["runCompleted", "runFailed", "runCancelled"];
export class Codec {
    /** @param {Json} json */
    constructor(json: Json);
    json: Json;
    /** Parse a JSON text field; `empty` is what empty text means. */
    parse(text: any, field: any, empty?: {}): any;
    /** JSON text for a value; `undefined` and `null` become empty text (the field's default). */
    stringify(value: any, field: any): string;
    /**
     * A wire `RunSpec` from a prompt or a `RunSpecInput`. Unknown keys are rejected, so a
     * misspelt `maxIteration` is an error rather than silently ignored; the snake_case names
     * of the first release (`max_iterations`) are still taken, with a deprecation warning.
     *
     * @param {string | import('./values.js').RunSpecInput} input
     * @param {Set<string>} [extra] keys the caller handles itself
     */
    encodeSpec(input: string | import("./values.js").RunSpecInput, extra?: Set<string>): {
        prompt: any;
        max_iterations: any;
        tool_names: any;
        no_server_tools: boolean;
        run_id: any;
        detach: boolean;
    };
    /**
     * A wire `OutputSchema` from `{name, schema, description}`: `schema` a JSON Schema object
     * (or its JSON text), `name` defaulting to `"output"`.
     *
     * @param {import('./values.js').OutputSchemaInput} output
     */
    encodeOutputSchema(output: import("./values.js").OutputSchemaInput): {
        name: string;
        schema: string;
        description: string;
    };
    /** An `OutputSchema` as plain values (`null` for none). */
    decodeOutputSchema(wire: any): any;
    encodeContext(input: any): {
        plan_id: any;
        phase: any;
        sandbox_root: any;
        automation_profile: any;
        resource_bindings: string;
        project_resources: string;
        tool_call_history: any;
    };
    /** @param {import('./values.js').ToolCallRecord} input */
    encodeRecord(input: import("./values.js").ToolCallRecord): {
        tool_name: any;
        inputs: string;
        output: string;
        duration_ms: any;
        success: boolean;
        iteration: any;
        call_id: any;
        started_at: {
            seconds: number;
            nanos: number;
        } | null;
        error_kind: any;
        output_truncated: boolean;
        output_bytes: any;
    };
    /** A wire `ToolSpec` from a tool definition (see `normaliseTools` in tools.js). */
    encodeToolSpec(tool: any): {
        name: any;
        description: any;
        input_schema: string;
        timeout: {
            seconds: number;
            nanos: number;
        } | null;
        side_effects: boolean;
        idempotent: boolean;
    };
    /** @param {import('./values.js').ToolCall} call */
    encodeToolCall(call: import("./values.js").ToolCall): {
        id: string;
        name: string;
        arguments: string;
    };
    /** @returns {import('./values.js').ToolCallRecord} */
    decodeRecord(wire: any): import("./values.js").ToolCallRecord;
    /**
     * A result: `output` the structured answer parsed (`null` without one), `outputJson` its
     * JSON text as the sidecar validated it.
     *
     * @returns {import('./values.js').ToolCallRunResult | null}
     */
    decodeResult(wire: any): import("./values.js").ToolCallRunResult | null;
    /** @returns {import('./values.js').ToolSpec} */
    decodeToolSpec(wire: any): import("./values.js").ToolSpec;
    /** @returns {import('./values.js').ToolCall} */
    decodeToolCall(wire: any): import("./values.js").ToolCall;
    /** @returns {import('./hosted_llm.js').LlmMessage} */
    decodeMessage(wire: any): import("./hosted_llm.js").LlmMessage;
    decodeSpec(wire: any): any;
    /** @returns {import('./values.js').RunEvent} */
    decodeEvent(wire: any): import("./values.js").RunEvent;
}
/**
 * How JSON text is read and written. The default is the global `JSON`, which turns integers
 * beyond 2^53 into approximate numbers; plug in a lossless parser if your tools need them.
 */
export type Json = {
    parse: (text: string) => any;
    stringify: (value: any) => string | undefined;
};
