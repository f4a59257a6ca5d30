"""The gateway: what the sidecar does for a caller, between the transport and the runs.

Every operation takes plain values (the caller's ``Identity``, core and wire values, what is
left of the call's deadline) and raises ``SidecarError``: no gRPC context, no protobuf. The
servicer and the RPC modules (``transport``) call it, never each other, and so does the
browser console (``console``).

- ``gateway``: ``Gateway``, starting runs and acting on them wherever they live (through the
  fleet's ``RunDirectory``).
- ``sessions``: a Session run whose client went away, waiting for it, and its re-attach.
- ``bounds``: a spec too large for its ``run_started`` event, refused before the run starts.
- ``values``: a watcher's view of a run (``Following``) and the sidecar's ``SidecarStatus``.
"""

from cleveragents.sidecar.gateway.gateway import NO_LAZY_TOOLS, Gateway, LazyTools
from cleveragents.sidecar.gateway.sessions import Reattach
from cleveragents.sidecar.gateway.values import Following, McpState, SidecarStatus

__all__ = [
    "NO_LAZY_TOOLS", "Following", "Gateway", "LazyTools", "McpState", "Reattach", "SidecarStatus",
]  # fmt: skip
