"""The Redis run store's key names, and its URL as logs may show it.

Every key of one run carries the hash tag ``{run_id}`` (Redis Cluster hashes only what is
between the braces), so that a run's stream, hash and set-aside copy share one shard. A
sidecar's own keys carry its id as their tag.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "INDEX_KEY",
    "PREFIX",
    "QUARANTINE_KEY",
    "SIDECARS_KEY",
    "adopter_key",
    "control_key",
    "lease_key",
    "log_key",
    "meta_key",
    "quarantine_key",
    "redacted",
    "runs_of_key",
]

#: Every key the store writes starts with this.
PREFIX = "cleveragents"
#: The sorted set of stored runs (score: when the run's first frame was written).
INDEX_KEY = f"{PREFIX}:runs"
#: The runs set aside because their logs could not be read back.
QUARANTINE_KEY = f"{PREFIX}:quarantined"
#: The set of sidecar ids that have registered with the store and not left it cleanly.
SIDECARS_KEY = f"{PREFIX}:sidecars"


def log_key(run_id: str) -> str:
    """The stream holding a run's frames (entry ids ``<sequence>-0``)."""
    return f"{PREFIX}:run:{{{run_id}}}:log"


def meta_key(run_id: str) -> str:
    """The hash holding a run's owner identity and the id of the sidecar that runs it."""
    return f"{PREFIX}:run:{{{run_id}}}:meta"


def quarantine_key(run_id: str) -> str:
    """Where a run's stream goes when it cannot be read back (same slot: a rename)."""
    return f"{PREFIX}:run:{{{run_id}}}:quarantine"


def lease_key(sidecar: str) -> str:
    """A sidecar's lease: present (with a time to live) while the sidecar heartbeats."""
    return f"{PREFIX}:sidecar:{{{sidecar}}}:lease"


def runs_of_key(sidecar: str) -> str:
    """The set of runs a sidecar started (or adopted) and has not forgotten."""
    return f"{PREFIX}:sidecar:{{{sidecar}}}:runs"


def control_key(sidecar: str) -> str:
    """The stream of cancels and approval decisions other sidecars send a sidecar."""
    return f"{PREFIX}:sidecar:{{{sidecar}}}:control"


def adopter_key(sidecar: str) -> str:
    """Taken (``SET NX``) by the one sidecar that adopts a dead sidecar's runs."""
    return f"{PREFIX}:sidecar:{{{sidecar}}}:adopter"


def redacted(url: str) -> str:
    """``url`` without its password, for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***@" if parts.username else "***@"
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=user + host))
