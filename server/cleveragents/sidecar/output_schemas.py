"""A run's output schema held to the limits of a client tool's input schema before it runs.

The schema comes from outside, so it is measured as a Session tool's schema is
(``execution.schemacost``, in time linear in its size) before it is compiled: nesting deeper
than ``max_schema_depth``, expanding to more than ``max_schema_expansion`` subschemas, a
reference outside itself or a pattern only a backtracking engine can run is refused
(``INVALID_ARGUMENT`` naming the limit). Its text over ``max_schema_bytes`` is refused before
it is parsed (``transport/run_specs.py``). Validating one answer then costs about the
expansion times the answer's JSON values, so an answer to a costly schema may hold at most
``max_validation_steps`` / expansion values (more is an invalid answer, sent back to the model).

A client usually sends the same schema run after run: the last :data:`CACHED_SCHEMAS` schemas
of at most :data:`CACHED_SCHEMA_CHARS` characters are kept measured and compiled
(:class:`PreparedSchemas`), so that such a run skips the measuring and compiling (about
0.2 ms for a small schema).
"""

from __future__ import annotations

import collections
import threading

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import SidecarError
from cleveragents.tool import OutputSchema
from cleveragents.tool.execution.schemacost import SchemaCostError, measure_schema

__all__ = [
    "CACHED_SCHEMAS",
    "CACHED_SCHEMA_CHARS",
    "CHEAP_EXPANSION",
    "PreparedSchemas",
    "prepare_output",
    "refuse_large_output",
]

#: A schema expanding to at most this many subschemas costs about what parsing the answer
#: did: its answers' values are not counted (the same bound as client tools').
CHEAP_EXPANSION = 32


def refuse_large_output(size: int, config: SidecarConfig) -> None:
    """``INVALID_ARGUMENT`` for an output schema of ``size`` bytes over ``max_schema_bytes``."""
    if size > config.limits.max_schema_bytes:
        raise SidecarError.invalid(
            f"spec.output_schema.schema is {size} bytes, more than this sidecar's "
            f"max_schema_bytes of {config.limits.max_schema_bytes}"
        )


def prepare_output(output: OutputSchema, config: SidecarConfig) -> OutputSchema:
    """Measure ``output`` against the schema limits, then compile it with the bound on its
    answers' values; ``SidecarError`` (``INVALID_ARGUMENT``) names what is refused."""
    try:
        cost = measure_schema(
            output.schema,
            max_depth=config.limits.max_schema_depth,
            max_expansion=config.limits.max_schema_expansion,
        )
    except SchemaCostError as exc:
        limit = exc.limit
        why = f" (this sidecar's {limit} is {config.setting(limit)})" if limit else ""
        raise SidecarError.invalid(f"spec.output_schema.schema {exc}{why}") from None
    steps = config.limits.max_validation_steps
    cap = steps // cost.expansion if cost.expansion > CHEAP_EXPANSION else None
    try:
        return output.prepare(max_values=cap)
    except ValueError as exc:
        raise SidecarError.invalid(f"spec.output_schema: {exc}") from None


#: How many prepared output schemas a sidecar keeps, and the longest one it keeps (in
#: characters of its text): at most 32 schemas of 64 Ki characters of schemas, and their validators.
CACHED_SCHEMAS = 32
CACHED_SCHEMA_CHARS = 64 * 1024

#: A schema as a request carries it (its name, JSON text and description) and the limits it
#: was measured against (max_schema_depth, max_schema_expansion, max_validation_steps).
SchemaKey = tuple[str, str, str, int, int, int]


class PreparedSchemas:
    """The output schemas prepared last, by their text (safe across threads: a large schema
    is read in a worker thread)."""

    __slots__ = ("_lock", "_schemas")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._schemas: collections.OrderedDict[SchemaKey, OutputSchema] = collections.OrderedDict()

    def get(self, key: SchemaKey) -> OutputSchema | None:
        """The schema prepared for ``key``, if it is kept."""
        with self._lock:
            found = self._schemas.get(key)
            if found is not None:
                self._schemas.move_to_end(key)
            return found

    def keep(self, key: SchemaKey, output: OutputSchema) -> None:
        """Keep ``output`` (prepared) for ``key``, unless its text is too long to."""
        if len(key[1]) > CACHED_SCHEMA_CHARS:
            return
        with self._lock:
            self._schemas[key] = output
            self._schemas.move_to_end(key)
            while len(self._schemas) > CACHED_SCHEMAS:
                self._schemas.popitem(last=False)
