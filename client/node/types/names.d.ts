/** @internal `tool_call_history` → `toolCallHistory`. */
export function camelName(snake: any): any;
/** @internal `toolCallHistory` → `tool_call_history`. */
export function snakeName(camel: any): any;
/** @internal Warn, once per name, that `old` (a snake_case name) is now `now`. */
export function deprecatedName(old: any, now: any): void;
/**
 * @internal
 * `object`, with a non-enumerable getter (and setter) under the snake_case name of each of
 * its camelCase keys, for code written against the first release: it reads the camelCase
 * field, warning once. Being non-enumerable, the old names stay out of `Object.keys`,
 * spreads, `JSON.stringify` and `assert.deepStrictEqual`.
 *
 * @template {object} T
 * @param {T} object
 * @returns {T}
 */
export function withLegacyNames<T extends object>(object: T): T;
/**
 * @internal
 * A wire object of @grpc/proto-loader (snake_case, as the protos name the fields) with every
 * key camelCase, recursively, and the old names readable (`withLegacyNames`). JSON text
 * fields are strings, so the values parsed from them are never touched. Keys beginning with
 * `_` (proto-loader's synthetic oneof of an `optional` field) are left out: the decoders
 * read presence before converting.
 *
 * @param {any} value
 * @returns {any}
 */
export function camelKeys(value: any): any;
/**
 * @internal
 * `input` (an object the caller gave: a spec, a tool definition, an answer) with its keys
 * checked against `allowed` (camelCase) and `extra` (keys the caller handles itself): a
 * snake_case spelling of an allowed key is taken for it, with a deprecation warning; any
 * other key is a TypeError naming the fields, so a misspelt one is not silently ignored.
 *
 * @param {Record<string, any>} input
 * @param {ReadonlySet<string>} allowed
 * @param {string} what  what the object is, for the message
 * @param {ReadonlySet<string>} [extra]
 * @returns {Record<string, any>}
 */
export function inputKeys(input: Record<string, any>, allowed: ReadonlySet<string>, what: string, extra?: ReadonlySet<string>): Record<string, any>;
