// The API's field names: camelCase for the protos' snake_case, as the protobuf JSON mapping
// names them. The snake_case names of the first release stay readable on what the client
// hands out, and accepted in what it takes, for one more release, with a deprecation warning.

const CAMEL = new Map();

/** @internal `tool_call_history` → `toolCallHistory`. */
export function camelName(snake) {
  let camel = CAMEL.get(snake);
  if (camel === undefined) {
    camel = snake.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
    CAMEL.set(snake, camel);
  }
  return camel;
}

/** @internal `toolCallHistory` → `tool_call_history`. */
export function snakeName(camel) {
  return camel.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

const warned = new Set();

/** @internal Warn, once per name, that `old` (a snake_case name) is now `now`. */
export function deprecatedName(old, now) {
  if (warned.has(old)) return;
  warned.add(old);
  process.emitWarning(
    `'${old}' is deprecated: the Node.js client's names are camelCase now ('${now}'); ` +
      'the snake_case names go in the next release',
    { type: 'DeprecationWarning', code: 'CLEVERAGENTS_SNAKE_CASE' },
  );
}

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
export function withLegacyNames(object) {
  for (const key of Object.keys(object)) {
    if (!/[A-Z]/.test(key)) continue;
    const old = snakeName(key);
    if (Object.prototype.hasOwnProperty.call(object, old)) continue;
    Object.defineProperty(object, old, {
      get() {
        deprecatedName(old, key);
        return this[key];
      },
      set(value) {
        deprecatedName(old, key);
        this[key] = value;
      },
      enumerable: false,
      configurable: true,
    });
  }
  return object;
}

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
export function camelKeys(value) {
  if (Array.isArray(value)) return value.map(camelKeys);
  if (value === null || typeof value !== 'object' || Object.getPrototypeOf(value) !== Object.prototype) {
    return value; // a scalar, a Buffer (bytes), a Date
  }
  const out = {};
  for (const key of Object.keys(value)) {
    if (key.charCodeAt(0) === 95) continue; // '_'
    out[camelName(key)] = camelKeys(value[key]);
  }
  return withLegacyNames(out);
}

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
export function inputKeys(input, allowed, what, extra = new Set()) {
  let out = null;
  for (const key of Object.keys(input)) {
    if (allowed.has(key) || extra.has(key)) continue;
    const camel = camelName(key);
    if (camel === key || !allowed.has(camel)) {
      const known = [...allowed, ...extra].join(', ');
      throw new TypeError(`unknown ${what} field '${key}' (its fields are ${known})`);
    }
    if (Object.prototype.hasOwnProperty.call(input, camel)) {
      throw new TypeError(`${what} has both '${camel}' and '${key}': give '${camel}' alone`);
    }
    deprecatedName(key, camel);
    out ??= { ...input };
    out[camel] = out[key];
    delete out[key];
  }
  return out ?? input;
}
