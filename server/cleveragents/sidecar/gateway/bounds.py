"""Sizes checked where they enter: a run whose ``run_started`` event could not be sent.

``run_started`` carries the spec as accepted, plus what the sidecar adds to it (a run id, the
iteration limit, the names of the tools offered). A spec close to ``max_message_bytes`` would
make that event too large for any stream to carry, so it is refused before the run starts.
"""

from __future__ import annotations

from cleveragents.sidecar.assembly import AssembledRun
from cleveragents.sidecar.errors import SidecarError
from cleveragents.tool import RunStarted
from cleveragents.wire import EventEncoder

__all__ = ["check_started_fits"]

#: The length of the run ids the sidecar assigns (``uuid4().hex``).
_ASSIGNED_ID = "0" * 32


def check_started_fits(assembled: AssembledRun, limit: int, max_message_bytes: int) -> None:
    """``INVALID_ARGUMENT`` unless the run's ``run_started`` frame fits in ``limit`` bytes."""
    request, runtime = assembled.request, assembled.runtime
    run_id = request.run_id or _ASSIGNED_ID
    started = RunStarted(
        run_id,
        request.prompt,
        tuple(s.name for s in runtime.offered_specs()),
        runtime.max_iterations,
    )
    size = len(EventEncoder(run_id, request).encode(1, started))
    if size > limit:
        raise SidecarError.invalid(
            f"the run's spec is too large: its run_started event would be {size} bytes, more "
            f"than the {limit} bytes one message may carry (the sidecar's max_message_bytes of "
            f"{max_message_bytes}, less room for the message around it); send a shorter prompt, "
            f"context or script ({size - limit} bytes too many)"
        )
