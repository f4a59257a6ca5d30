"""Compare JSON Schema validators for the ToolRunner's validate stage.

Measures, for a typical tool schema, the compile cost and the cost of validating a
valid and an invalid argument object. Needs the two contenders that are not dependencies:
    .venv/bin/pip install fastjsonschema jsonschema
Run: .venv/bin/python bench/schema_validators.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "limit": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
        "mode": {"enum": ["fast", "slow"]},
    },
    "required": ["path"],
    "additionalProperties": False,
}
VALID = {"path": "a/b.txt", "limit": 10, "tags": ["x", "y"], "mode": "fast"}
INVALID = {"path": "a/b.txt", "limit": "ten"}


def per_call_us(fn: Callable[[], object], number: int, repeat: int = 7) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number * 1e6)
    return statistics.median(samples)


def main() -> None:
    import fastjsonschema
    import jsonschema
    import jsonschema_rs

    def fjs_invalid(v: Callable[[Any], Any]) -> Callable[[], object]:
        def run() -> object:
            try:
                v(INVALID)
            except fastjsonschema.JsonSchemaValueException as exc:
                return exc.message
            return None

        return run

    fjs = fastjsonschema.compile(SCHEMA)
    js = jsonschema.Draft202012Validator(SCHEMA)
    rs = jsonschema_rs.validator_for(SCHEMA)

    rows = [
        (
            "fastjsonschema",
            per_call_us(lambda: fastjsonschema.compile(SCHEMA), 50),
            per_call_us(lambda: fjs(VALID), 20000),
            per_call_us(fjs_invalid(fjs), 20000),
        ),
        (
            "jsonschema",
            per_call_us(lambda: jsonschema.Draft202012Validator(SCHEMA), 2000),
            per_call_us(lambda: js.is_valid(VALID), 2000),
            per_call_us(lambda: next(iter(js.iter_errors(INVALID)), None), 2000),
        ),
        (
            "jsonschema-rs",
            per_call_us(lambda: jsonschema_rs.validator_for(SCHEMA), 2000),
            per_call_us(lambda: rs.validate(VALID), 20000),
            per_call_us(lambda: next(iter(rs.iter_errors(INVALID)), None), 20000),
        ),
    ]
    print(f"{'validator':16} {'compile µs':>12} {'valid µs':>10} {'invalid µs':>11}")
    for name, compile_us, valid_us, invalid_us in rows:
        print(f"{name:16} {compile_us:12.1f} {valid_us:10.2f} {invalid_us:11.2f}")


if __name__ == "__main__":
    main()
