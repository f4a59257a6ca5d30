"""The run console: a page in the browser, served by the sidecar itself (``console_listen``).

It lists the runs live, shows each run's timeline as it happens (the model's text as it
streams, every tool call with its inputs, output and duration, the calls that ran side by side
on a time axis, approvals, usage, budgets, the stop reason), lets an identity that may decide
approve or deny a waiting call and one that may cancel stop a run, and shows a run of another
sidecar of the fleet the same way. It is a way in to the ``Gateway``, as the gRPC transport is:
the same operations, identities and roles. The sidecar imports this package (and ``aiohttp``)
only when the console is on.

- ``server``: ``Console``, the HTTP server and its JSON API;
- ``access``: who asks (a token, or the client certificate), and what a request must carry;
- ``streams``: the live feeds (server-sent events): a run's timeline, the runs list;
- ``views`` and ``rows``: what a page is sent, as JSON values;
- ``address``: the page's URL (what ``cleveragents-sidecar console`` prints);
- ``static/``: the page itself (plain HTML, CSS and JavaScript; nothing to build).

``Console`` is imported on first use, so that ``address`` loads no HTTP library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cleveragents.sidecar.console.access import Callers, Rejecter
    from cleveragents.sidecar.console.server import Console

__all__ = ["Callers", "Console", "Rejecter"]

_HOMES = {
    "Callers": "cleveragents.sidecar.console.access",
    "Rejecter": "cleveragents.sidecar.console.access",
    "Console": "cleveragents.sidecar.console.server",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
