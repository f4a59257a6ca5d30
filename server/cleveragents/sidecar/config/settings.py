"""The sidecar's settings as frozen values, each checked when it is built."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cleveragents.sidecar.config.policies import Policy, check_deciders
from cleveragents.sidecar.config.profiles import PROFILE_KINDS, PROVIDER_KINDS, ProfileConfig
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.eventloop import check_event_loop
from cleveragents.sidecar.identity import DEFAULT_IDENTITY, ROLES, normal_subject
from cleveragents.tool import BUILTIN_PROFILES, AutomationProfile, ToolLimit

if TYPE_CHECKING:  # the MCP settings are parsed (config/mcp.py loaded) only when there are some
    from cleveragents.sidecar.config.mcp import McpServerConfig

__all__ = [
    "ENV_PREFIX",
    "PROFILE_KINDS",
    "PROVIDER_KINDS",
    "ClientConfig",
    "ProfileConfig",
    "SidecarConfig",
]

ENV_PREFIX = "CLEVERAGENTS_SIDECAR_"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_PORT = 65535


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """One client identity (``[clients.NAME]``): its credentials, roles and policy.

    Its token comes from ``token_env`` (an environment variable's name) or ``token_file``;
    ``token`` inline is accepted with a warning at start-up (the file is then a secret).
    ``subjects`` are mutual-TLS certificate subjects (``"CN=alice"``) that stand for it.
    ``policy`` names the governance policy of its runs ("" for the default one).
    """

    name: str
    token_env: str = ""
    token_file: str = ""
    token: str = ""
    subjects: tuple[str, ...] = ()
    roles: frozenset[str] = frozenset()
    policy: str = ""

    def __post_init__(self) -> None:
        where = f"clients.{self.name}"
        if not self.name or self.name == DEFAULT_IDENTITY.name:
            raise ConfigError(
                f"{where}: the name {self.name!r} is taken by the shared token's identity"
            )
        if sum(map(bool, (self.token_env, self.token_file, self.token))) > 1:
            raise ConfigError(f"{where}: set one of token_env, token_file or token")
        if not (self.token_env or self.token_file or self.token or self.subjects):
            raise ConfigError(f"{where} has no credentials: set token_env, token_file or subjects")
        if self.token_env and not _ENV_NAME.fullmatch(self.token_env):
            raise ConfigError(f"{where}.token_env must name an environment variable")
        if unknown := sorted(self.roles - set(ROLES)):
            raise ConfigError(
                f"{where}.roles: unknown role(s) {', '.join(unknown)}; known: {', '.join(ROLES)}"
            )
        if not isinstance(self.policy, str):
            raise ConfigError(f"{where}.policy must be a string naming a policy")
        if any(not isinstance(s, str) or "=" not in s for s in self.subjects):
            raise ConfigError(f"{where}.subjects must be certificate subjects like 'CN=alice'")


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    """Every setting of the sidecar, with production defaults."""

    listen: str = "127.0.0.1:50051"
    log_format: str = "json"
    log_level: str = "info"
    max_concurrent_runs: int = 1000
    max_message_bytes: int = 16 * 1024 * 1024
    max_iterations_cap: int = 1000
    #: Tools one Session may declare, and tool calls one LLM response may ask for: what one
    #: message can make the sidecar do at once (10^5 tools stalled every run for 2.5 s).
    max_session_tools: int = 1024
    max_calls_per_response: int = 256
    #: What one client tool's JSON Schema may cost (see tool/execution/schemacost.py): a 2 KB
    #: schema doubling through $ref/allOf froze every run for 25 s before these bounds.
    max_schema_bytes: int = 256 * 1024
    max_schema_depth: int = 64
    max_schema_expansion: int = 10_000
    #: Schema nodes times argument values one call's validation may visit (about 25 ms).
    max_validation_steps: int = 1_000_000
    default_tool_timeout_s: float = 60.0
    #: How long a Session's run waits for its client to answer an LLM invocation, and the
    #: longest timeout a client may declare for its tools: a silent client frees its run slot.
    client_llm_timeout_s: float = 300.0
    max_client_tool_timeout_s: float = 3600.0
    finished_run_ttl_s: float = 900.0
    max_finished_runs: int = 1000
    #: The finished runs kept together may hold this many bytes of logs; oldest go first.
    max_finished_run_bytes: int = 256 * 1024 * 1024
    watcher_queue_size: int = 16384
    #: A watcher whose write gRPC has not taken for this long (its client stopped reading) is
    #: dropped with RESOURCE_EXHAUSTED.
    watcher_stall_s: float = 30.0
    #: What a FollowRun watcher may have in flight unacknowledged, in bytes of messages.
    watch_window_bytes: int = 1024 * 1024
    #: What one identity's FollowRun watchers together may have in flight unacknowledged (one
    #: message always may go when none is in flight); a watcher that cannot send for
    #: ``watcher_stall_s`` because of it is dropped with RESOURCE_EXHAUSTED.
    watch_window_bytes_per_identity: int = 32 * 1024 * 1024
    #: Whether ``WatchRun`` is served: what a watcher that stops reading costs there is
    #: bounded only by the flow-control window its client grants. ``FollowRun`` stays.
    allow_unacknowledged_watch: bool = True
    shutdown_grace_s: float = 10.0
    builtin_tools: bool = True
    file_tools: bool = True
    tool_modules: tuple[str, ...] = ()
    default_profile: str = "scripted"
    profiles: Mapping[str, ProfileConfig] = field(default_factory=dict)
    event_store: str = ""
    #: With a durable ``event_store``: whether the detached, server-hosted runs that were live
    #: when the sidecar stopped resume from their logs at start (false: they end with
    #: ``run_failed``, as before resuming existed).
    resume_runs: bool = True
    #: The environment variable holding the Redis password, for an ``event_store`` URL
    #: that carries none (a password in the URL wins); never logged.
    event_store_password_env: str = ""
    #: With a shared (Redis) store: this sidecar's id among those sharing it (empty: a random
    #: one per start). A sidecar restarted with the same id takes its live runs back at once;
    #: ids must be unique among the sidecars running at one time.
    sidecar_id: str = ""
    #: With a shared store: how long a sidecar's lease lasts unrenewed (renewed three times a
    #: lease); once it expires, another sidecar adopts its live runs.
    event_store_lease_s: float = 10.0
    #: With a ``rediss://`` (TLS) ``event_store``: the CA certificate file (PEM) that the
    #: Redis server's certificate must chain to (empty: the system's trusted CAs).
    event_store_ca_file: str = ""
    #: With a ``rediss://`` ``event_store`` whose server asks for client certificates (Redis's
    #: ``tls-auth-clients``): this sidecar's certificate and its private key (PEM), both or
    #: neither (empty: no client certificate).
    event_store_cert_file: str = ""
    event_store_key_file: str = ""
    #: How long a Session run whose client went away (its stream ended, or the sidecar
    #: restarted on a durable store with ``resume_runs``) waits for the client to re-attach
    #: (``SessionStart.reattach_run_id``) before it fails; 0: no wait (it is cancelled, or
    #: fails at a restart, at once).
    session_reattach_s: float = 30.0
    default_automation_profile: str = "supervised"
    approval_timeout_s: float = 300.0
    approve_on_timeout: bool = False
    #: How long a call waits for approval when nobody follows its run (no Session that
    #: handles approvals, no StreamToolLoop caller, no watcher): 0 applies the default at once
    #: rather than hang a unary RunToolLoop for ``approval_timeout_s`` with no one to ask.
    approval_timeout_unattended_s: float = 0.0
    automation_profiles: Mapping[str, AutomationProfile] = field(default_factory=dict)
    #: Limits per tool name, counted per origin: the sidecar's own tool, or each principal's
    #: client-hosted tool of that name.
    tool_limits: Mapping[str, ToolLimit] = field(default_factory=dict)
    #: Governance: the global ``[policy]`` and the named ``[policies.NAME]`` (see policies.py).
    policy: Policy = field(default_factory=Policy)
    policies: Mapping[str, Policy] = field(default_factory=dict)
    metrics_listen: str = ""
    tracing: bool = False
    auth_token_env: str = ""
    auth_token_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""
    #: Named client identities (``[clients.NAME]``); the shared token, if set, is one more,
    #: ``default``, with every role.
    clients: Mapping[str, ClientConfig] = field(default_factory=dict)
    #: At most one ``rejected credentials`` warning per this many seconds (the rest counted).
    auth_reject_log_interval_s: float = 10.0
    #: Directories (or glob patterns, ``*`` matching one path component) a run's
    #: ``sandbox_root`` must resolve inside; empty: no run may name one (see sandbox_roots.py).
    sandbox_roots: tuple[str, ...] = ()
    #: Health ``Watch`` streams open at once, authenticated or not; more is RESOURCE_EXHAUSTED.
    max_health_watchers: int = 256
    #: With an auth token, ``GET /metrics`` must carry ``Authorization: Bearer <token>`` too.
    metrics_require_token: bool = True
    #: ``auto`` (uvloop if installed), ``asyncio`` or ``uvloop``; used by ``cleveragents-sidecar
    #: serve``. An embedding program runs the sidecar on its own loop.
    event_loop: str = "auto"
    #: Exit (live runs cancelled, store flushed) when the process that started ``serve``
    #: dies, even by ``kill -9`` (see cli/lifecycle.py); ``parent_pid`` watches another one.
    exit_with_parent: bool = False
    parent_pid: int = 0
    #: Once listening, ``serve`` writes a one-line JSON ``{"address", "pid", "version",
    #: "metrics_port"}`` to this file (atomically) and/or this inherited descriptor (0: none).
    ready_file: str = ""
    ready_fd: int = 0
    #: Directories searched for ``tool_modules`` before ``sys.path`` (relative ones from the
    #: config file's directory); the config file's directory and the working directory always are.
    python_path: tuple[str, ...] = ()
    #: MCP servers whose tools the sidecar offers (``[mcp_servers.NAME]``, see config/mcp.py).
    mcp_servers: Mapping[str, McpServerConfig] = field(default_factory=dict)
    #: At most one warning per MCP server per this many seconds for lines it writes that are
    #: not JSON-RPC (the rest counted, and the count logged with the next).
    mcp_log_interval_s: float = 1.0

    def __post_init__(self) -> None:
        _check_listen(self.listen)
        if self.parent_pid < 0 or self.ready_fd < 0:
            raise ConfigError("parent_pid and ready_fd must be 0 (none) or a positive number")
        for name in (
            "max_concurrent_runs",
            "max_message_bytes",
            "max_iterations_cap",
            "max_session_tools",
            "max_calls_per_response",
            "max_schema_bytes",
            "max_schema_depth",
            "max_schema_expansion",
            "max_validation_steps",
            "max_health_watchers",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
        for name in (
            "default_tool_timeout_s",
            "client_llm_timeout_s",
            "max_client_tool_timeout_s",
            "shutdown_grace_s",
            "finished_run_ttl_s",
            "watcher_stall_s",
            "auth_reject_log_interval_s",
            "event_store_lease_s",
            "mcp_log_interval_s",
        ):
            if not (getattr(self, name) > 0 and math.isfinite(getattr(self, name))):
                raise ConfigError(f"{name} must be a positive number of seconds")
        if self.max_client_tool_timeout_s < self.default_tool_timeout_s:
            raise ConfigError(
                "max_client_tool_timeout_s must be at least default_tool_timeout_s, which "
                "client tools without their own timeout get"
            )
        if self.event_store_ca_file and not self.event_store.startswith("rediss://"):
            raise ConfigError("event_store_ca_file is for a rediss:// event_store (Redis over TLS)")
        if bool(self.event_store_cert_file) != bool(self.event_store_key_file):
            raise ConfigError(
                "event_store_cert_file and event_store_key_file go together: set both or neither"
            )
        if self.event_store_cert_file and not self.event_store.startswith("rediss://"):
            raise ConfigError(
                "event_store_cert_file is for a rediss:// event_store (Redis over TLS)"
            )
        if not (self.session_reattach_s >= 0 and math.isfinite(self.session_reattach_s)):
            raise ConfigError("session_reattach_s must be 0 (no wait) or a number of seconds")
        if self.watcher_queue_size < 1 or self.max_finished_runs < 0:
            raise ConfigError("watcher_queue_size must be >= 1 and max_finished_runs >= 0")
        if self.watch_window_bytes < 4096:
            raise ConfigError("watch_window_bytes must be at least 4096")
        if self.watch_window_bytes_per_identity < self.watch_window_bytes:
            raise ConfigError(
                "watch_window_bytes_per_identity must be at least watch_window_bytes (one "
                "watcher's window)"
            )
        if self.max_finished_run_bytes < 0:
            raise ConfigError("max_finished_run_bytes must be >= 0")
        if self.log_format not in ("json", "console"):
            raise ConfigError(f"log_format must be 'json' or 'console', not {self.log_format!r}")
        if self.default_profile not in self.all_profiles():
            raise ConfigError(f"default_profile {self.default_profile!r} is not a known profile")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError("tls_cert_file and tls_key_file go together: set both or neither")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ConfigError(
                "tls_client_ca_file (mutual TLS) needs tls_cert_file and tls_key_file"
            )
        if self.default_automation_profile not in self.all_automation_profiles():
            raise ConfigError(
                f"default_automation_profile {self.default_automation_profile!r} is not a known "
                "automation profile"
            )
        if not (self.approval_timeout_s > 0 and math.isfinite(self.approval_timeout_s)):
            raise ConfigError("approval_timeout_s must be a positive number of seconds")
        unattended = self.approval_timeout_unattended_s
        if not (unattended >= 0 and math.isfinite(unattended)):
            raise ConfigError(
                "approval_timeout_unattended_s must be 0 (decide at once) or more seconds"
            )
        check_event_loop(self.event_loop)
        for root in self.sandbox_roots:
            if not isinstance(root, str) or not root.startswith("/") or "\x00" in root:
                raise ConfigError(f"sandbox_roots entries must be absolute paths, got {root!r}")
            literal = root.split("/")[1] if root.strip("/") else ""
            if not literal or any(c in literal for c in "*?["):
                raise ConfigError(
                    f"sandbox_roots entry {root!r} would allow every top-level directory (or "
                    "'/', the whole file system): begin it with a fixed directory"
                )
        if self.auth_token_env and self.auth_token_file:
            raise ConfigError("set auth_token_env or auth_token_file, not both")
        self._check_clients()
        self._check_policies()
        for name, server in self.mcp_servers.items():
            if server.name != name:
                raise ConfigError(f"mcp_servers.{name} is named {server.name!r}")
            server.check_max_timeout(self.default_tool_timeout_s)

    def _check_clients(self) -> None:
        subjects: dict[frozenset[str], str] = {}
        for name, client in self.clients.items():
            if client.name != name:
                raise ConfigError(f"clients.{name} is named {client.name!r}")
            if client.subjects and not self.tls_client_ca_file:
                raise ConfigError(
                    f"clients.{name}.subjects needs mutual TLS: set tls_client_ca_file"
                )
            for subject in client.subjects:
                # Compared as the certificate check compares them: attribute order and
                # spacing aside ("CN=a,O=b" and "O=b, CN=a" are one subject).
                if (other := subjects.setdefault(normal_subject(subject), name)) != name:
                    raise ConfigError(
                        f"subject {subject!r} is given to both clients.{other} and clients.{name}"
                    )
            if client.policy and client.policy not in self.policies:
                raise ConfigError(
                    f"clients.{name}.policy names {client.policy!r}, but there is no "
                    f"[policies.{client.policy}]"
                )

    def _check_policies(self) -> None:
        """Every policy's globs name something that exists, and allow the defaults a run that
        names nothing gets (else every such run would be refused)."""
        automation, llm = self.all_automation_profiles(), self.all_profiles()
        for name, policy in {"": self.policy, **self.policies}.items():
            if policy.name != name:
                raise ConfigError(f"policies.{name} holds a policy named {policy.name!r}")
            policy.check_known("automation_profiles", list(automation))
            policy.check_known("llm_profiles", list(llm))
            for key, default, setting in (
                ("automation_profiles", self.default_automation_profile, "default_automation"),
                ("llm_profiles", self.default_profile, "default"),
            ):
                if not policy.allows(key, default):
                    raise ConfigError(
                        f"{policy.where}.{key} does not allow {default!r}, the {setting}_profile "
                        "a run that names none gets: add it, or change that setting"
                    )
        identities = {c.name: (c.policy, c.roles) for c in self.clients.values()}
        if self.auth_token_env or self.auth_token_file or not self.clients:
            identities["default"] = ("", frozenset({"approver", "admin"}))  # every role
        check_deciders({"": self.policy, **self.policies}, identities)

    def policy_named(self, name: str) -> Policy:
        """The policy ``[policies.NAME]`` (``""``: the global ``[policy]``); ``KeyError`` if
        there is none."""
        return self.policies[name] if name else self.policy

    def all_automation_profiles(self) -> dict[str, AutomationProfile]:
        """The built-in automation profiles plus the configured ones (which may replace them)."""
        profiles = dict(BUILTIN_PROFILES)
        profiles.update(self.automation_profiles)
        return profiles

    def all_profiles(self) -> dict[str, ProfileConfig]:
        """Configured profiles plus the embedded ``scripted`` and ``client`` ones."""
        profiles = {
            "scripted": ProfileConfig("scripted", "scripted", stream_delay_s=0.0),
            "client": ProfileConfig("client", "client"),
        }
        profiles.update(self.profiles)
        return profiles


def _check_listen(listen: str) -> None:
    """A ``host:port`` or ``unix:`` address; a bare port gets the two likely meanings. A port
    past 65535 is refused: gRPC would take it modulo 65536 and listen somewhere else."""
    if listen.startswith("unix:"):
        return
    host, colon, port = listen.rpartition(":")
    if colon and host and port.isdigit() and int(port) > _MAX_PORT:
        raise ConfigError(
            f"listen {listen!r}: port {int(port)} is out of range: a port is 0 to {_MAX_PORT} "
            "(0 picks a free one)"
        )
    if not colon or not host or not port.isdigit():
        hint = ""
        if listen.isdigit():
            hint = (
                f": did you mean 127.0.0.1:{listen} (this machine only) or [::]:{listen} "
                "(every interface, which needs auth or TLS)?"
            )
        raise ConfigError(
            f"listen must be HOST:PORT (port 0 picks a free one) or unix:/path, got {listen!r}"
            + hint
        )
