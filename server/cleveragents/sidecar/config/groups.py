"""The sidecar's settings grouped by what they are about, as frozen values: the bounds on what a
run and a client may do (``RunLimits``), how long finished runs are kept (``Retention``),
watchers (``WatchSettings``), the run store and its fleet (``StoreSettings``), TLS, the shared
token (``AuthSettings``), approvals, the process around the sidecar (``ProcessSettings``),
metrics and the browser console (``ConsoleSettings``). ``SidecarConfig`` holds one of each.

A group's fields have short names (``config.store.lease_s``); each keeps the setting's one
name everywhere a user meets it (``event_store_lease_s``: its TOML key, its environment
variable, its flag), in its metadata (``KEY``). ``setting_fields`` lists every setting by that
name, the loader, the flags and the docs' reference alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "GROUPS",
    "KEY",
    "ApprovalSettings",
    "AuthSettings",
    "ConsoleSettings",
    "MetricsSettings",
    "ProcessSettings",
    "Retention",
    "RunLimits",
    "StoreSettings",
    "TlsSettings",
    "WatchSettings",
    "setting_fields",
]

#: The metadata key of a group's field that holds the setting's name (its TOML key).
KEY = "key"


def _named(key: str, default: Any) -> Any:
    """A field whose setting is called ``key`` where users meet it."""
    return field(default=default, metadata={KEY: key})


@dataclass(frozen=True, slots=True)
class RunLimits:
    """What a run, and a client, may make the sidecar do."""

    max_concurrent_runs: int = _named("max_concurrent_runs", 1000)
    max_message_bytes: int = _named("max_message_bytes", 16 * 1024 * 1024)
    max_iterations_cap: int = _named("max_iterations_cap", 1000)
    #: Tools one Session may declare, and tool calls one LLM response may ask for: what one
    #: message can make the sidecar do at once (10^5 tools stalled every run for 2.5 s).
    max_session_tools: int = _named("max_session_tools", 1024)
    max_calls_per_response: int = _named("max_calls_per_response", 256)
    #: What one client tool's JSON Schema may cost (see tool/execution/schemacost.py): a 2 KB
    #: schema doubling through $ref/allOf froze every run for 25 s before these bounds.
    max_schema_bytes: int = _named("max_schema_bytes", 256 * 1024)
    max_schema_depth: int = _named("max_schema_depth", 64)
    max_schema_expansion: int = _named("max_schema_expansion", 10_000)
    #: Schema nodes times argument values one call's validation may visit (about 25 ms).
    max_validation_steps: int = _named("max_validation_steps", 1_000_000)
    default_tool_timeout_s: float = _named("default_tool_timeout_s", 60.0)
    #: How long a Session's run waits for its client to answer an LLM invocation, and the
    #: longest timeout a client may declare for its tools: a silent client frees its run slot.
    client_llm_timeout_s: float = _named("client_llm_timeout_s", 300.0)
    max_client_tool_timeout_s: float = _named("max_client_tool_timeout_s", 3600.0)
    #: Health ``Watch`` streams open at once, authenticated or not; more is RESOURCE_EXHAUSTED.
    max_health_watchers: int = _named("max_health_watchers", 256)


@dataclass(frozen=True, slots=True)
class Retention:
    """How long, how many and how much of the finished runs are kept."""

    ttl_s: float = _named("finished_run_ttl_s", 900.0)
    max_runs: int = _named("max_finished_runs", 1000)
    #: The finished runs kept together may hold this many bytes of logs; oldest go first.
    max_bytes: int = _named("max_finished_run_bytes", 256 * 1024 * 1024)


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """What a watcher (``WatchRun``, ``FollowRun``) may cost."""

    queue_size: int = _named("watcher_queue_size", 16384)
    #: A watcher whose write gRPC has not taken for this long (its client stopped reading) is
    #: dropped with RESOURCE_EXHAUSTED.
    stall_s: float = _named("watcher_stall_s", 30.0)
    #: What a FollowRun watcher may have in flight unacknowledged, in bytes of messages.
    window_bytes: int = _named("watch_window_bytes", 1024 * 1024)
    #: What one identity's FollowRun watchers together may have in flight unacknowledged (one
    #: message always may go when none is in flight); a watcher that cannot send for
    #: ``watcher_stall_s`` because of it is dropped with RESOURCE_EXHAUSTED.
    window_bytes_per_identity: int = _named("watch_window_bytes_per_identity", 32 * 1024 * 1024)
    #: Whether ``WatchRun`` is served: what a watcher that stops reading costs there is
    #: bounded only by the flow-control window its client grants. ``FollowRun`` stays.
    allow_unacknowledged: bool = _named("allow_unacknowledged_watch", True)


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """Where run logs live, and, with Redis, the fleet of sidecars sharing them."""

    url: str = _named("event_store", "")
    #: With a durable ``event_store``: whether the detached, server-hosted runs that were live
    #: when the sidecar stopped resume from their logs at start (false: they end with
    #: ``run_failed``, as before resuming existed).
    resume_runs: bool = _named("resume_runs", True)
    #: The environment variable holding the Redis password, for an ``event_store`` URL
    #: that carries none (a password in the URL wins); never logged.
    password_env: str = _named("event_store_password_env", "")
    #: With a shared (Redis) store: this sidecar's id among those sharing it (empty: a random
    #: one per start). A sidecar restarted with the same id takes its live runs back at once;
    #: ids must be unique among the sidecars running at one time.
    sidecar_id: str = _named("sidecar_id", "")
    #: With a shared store: how long a sidecar's lease lasts unrenewed (renewed three times a
    #: lease); once it expires, another sidecar adopts its live runs.
    lease_s: float = _named("event_store_lease_s", 10.0)
    #: With a ``rediss://`` (TLS) ``event_store``: the CA certificate file (PEM) that the
    #: Redis server's certificate must chain to (empty: the system's trusted CAs).
    ca_file: str = _named("event_store_ca_file", "")
    #: With a ``rediss://`` ``event_store`` whose server asks for client certificates (Redis's
    #: ``tls-auth-clients``): this sidecar's certificate and its private key (PEM), both or
    #: neither (empty: no client certificate).
    cert_file: str = _named("event_store_cert_file", "")
    key_file: str = _named("event_store_key_file", "")
    #: With a Redis ``event_store``: what every key this sidecar writes there starts with.
    #: Deployments sharing one Redis give each its own prefix and see nothing of each other's
    #: runs, leases or control streams; the sidecars of one fleet share one. 1 to 64
    #: characters from ``A-Z a-z 0-9 _ . : -``.
    key_prefix: str = _named("event_store_key_prefix", "cleveragents")


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The server's TLS: its certificate and key, and (mutual TLS) its clients' CA."""

    cert_file: str = _named("tls_cert_file", "")
    key_file: str = _named("tls_key_file", "")
    client_ca_file: str = _named("tls_client_ca_file", "")


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """The shared token (the ``default`` identity's), and how refusals are logged."""

    token_env: str = _named("auth_token_env", "")
    token_file: str = _named("auth_token_file", "")
    #: At most one ``rejected credentials`` warning per this many seconds (the rest counted).
    reject_log_interval_s: float = _named("auth_reject_log_interval_s", 10.0)


@dataclass(frozen=True, slots=True)
class ApprovalSettings:
    """How long a call waits for an approval, and what applies when none comes."""

    timeout_s: float = _named("approval_timeout_s", 300.0)
    approve_on_timeout: bool = _named("approve_on_timeout", False)
    #: How long a call waits for approval when nobody follows its run (no Session that
    #: handles approvals, no StreamToolLoop caller, no watcher): 0 applies the default at once
    #: rather than hang a unary RunToolLoop for ``approval_timeout_s`` with no one to ask.
    unattended_timeout_s: float = _named("approval_timeout_unattended_s", 0.0)


@dataclass(frozen=True, slots=True)
class ProcessSettings:
    """The process around the sidecar: its event loop, its stop, its parent, its ready line."""

    shutdown_grace_s: float = _named("shutdown_grace_s", 10.0)
    #: ``auto`` (uvloop if installed), ``asyncio`` or ``uvloop``; used by ``cleveragents-sidecar
    #: serve``. An embedding program runs the sidecar on its own loop.
    event_loop: str = _named("event_loop", "auto")
    #: Exit (live runs cancelled, store flushed) when the process that started ``serve``
    #: dies, even by ``kill -9`` (see cli/lifecycle.py); ``parent_pid`` watches another one.
    exit_with_parent: bool = _named("exit_with_parent", False)
    parent_pid: int = _named("parent_pid", 0)
    #: Once listening, ``serve`` writes a one-line JSON ``{"address", "pid", "version",
    #: "metrics_port", "console_url"}`` to this file (atomically) and/or this inherited
    #: descriptor (0: none).
    ready_file: str = _named("ready_file", "")
    ready_fd: int = _named("ready_fd", 0)


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """Prometheus metrics: where they are served, and whether a scrape needs the token."""

    listen: str = _named("metrics_listen", "")
    #: With an auth token, ``GET /metrics`` must carry ``Authorization: Bearer <token>`` too.
    require_token: bool = _named("metrics_require_token", True)


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """The run console in the browser: where it is served (empty: nowhere), and how many pages
    may follow runs at once."""

    #: ``HOST:PORT`` of the run console, served by the sidecar itself (port 0 picks one);
    #: empty: off, and its HTTP library is not even imported. Beyond loopback it needs auth
    #: or TLS, as ``listen`` does; with ``tls_cert_file`` it is served over HTTPS.
    listen: str = _named("console_listen", "")
    #: Live streams (a runs list, a run's timeline) open at once over every page; more are
    #: refused with 503 until one closes: each holds a cursor and a task.
    max_streams: int = _named("console_max_streams", 256)


#: Each group's field on ``SidecarConfig``, and its class.
GROUPS: dict[str, type[Any]] = {
    "limits": RunLimits,
    "retention": Retention,
    "watching": WatchSettings,
    "store": StoreSettings,
    "tls": TlsSettings,
    "auth": AuthSettings,
    "approvals": ApprovalSettings,
    "process": ProcessSettings,
    "metrics": MetricsSettings,
    "console": ConsoleSettings,
}


def setting_fields(
    config: type[Any],
) -> Iterator[tuple[str, tuple[str, ...], dataclasses.Field[Any]]]:
    """Every setting of ``config`` (``SidecarConfig``), in its declared order: its name (the
    TOML key), its attribute path and its dataclass field; a group's fields in its place."""
    for spec in dataclasses.fields(config):
        group = GROUPS.get(spec.name)
        if group is None:
            yield spec.name, (spec.name,), spec
            continue
        for member in dataclasses.fields(group):
            yield member.metadata[KEY], (spec.name, member.name), member
