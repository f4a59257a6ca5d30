"""Where the console's page is: its URL from the address it is bound to (no HTTP library: the
``console`` command prints it without importing the server)."""

from __future__ import annotations

import socket
import urllib.parse

__all__ = ["WILDCARD_HOSTS", "page_url", "run_url"]

#: Hosts that bind every interface: the page's URL names the machine instead.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})


def page_url(host: str, port: int, *, tls: bool) -> str:
    """The page's URL for a console bound to ``host`` (as ``console_listen`` writes it, an
    IPv6 one in brackets) and ``port``."""
    shown = socket.gethostname() if host in WILDCARD_HOSTS else host
    return f"{'https' if tls else 'http'}://{shown}:{port}/"


def run_url(page: str, run_id: str) -> str:
    """The URL of run ``run_id``'s page on the console at ``page``."""
    return f"{page}#/runs/{urllib.parse.quote(run_id, safe='')}"
