"""The sidecar's settings as frozen values, each checked when it is built."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cleveragents.sidecar.config.groups import (
    GROUPS,
    ApprovalSettings,
    AuthSettings,
    ConsoleSettings,
    MetricsSettings,
    ProcessSettings,
    Retention,
    RunLimits,
    StoreSettings,
    TlsSettings,
    WatchSettings,
    setting_fields,
)
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
#: What ``event_store_key_prefix`` may be: no braces (Redis Cluster hash tags), no spaces.
_KEY_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
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


@dataclass(frozen=True, slots=True, init=False)
class SidecarConfig:
    """Every setting of the sidecar, with production defaults, the related ones in groups
    (``groups.py``: ``config.store.lease_s``, ``config.limits.max_message_bytes``...).

    It is built from settings by their names, as the TOML file, the environment and the
    flags name them: ``SidecarConfig(event_store="runs.sqlite", watcher_stall_s=5)``; a
    group may be given whole too (``store=StoreSettings(...)``), and settings by name then
    change it. ``setting(name)`` reads one by its name.
    """

    listen: str = "127.0.0.1:50051"
    log_format: str = "json"
    log_level: str = "info"
    limits: RunLimits = field(default_factory=RunLimits)
    retention: Retention = field(default_factory=Retention)
    watching: WatchSettings = field(default_factory=WatchSettings)
    builtin_tools: bool = True
    file_tools: bool = True
    tool_modules: tuple[str, ...] = ()
    default_profile: str = "scripted"
    profiles: Mapping[str, ProfileConfig] = field(default_factory=dict)
    store: StoreSettings = field(default_factory=StoreSettings)
    #: How long a Session run whose client went away (its stream ended, or the sidecar
    #: restarted on a durable store with ``resume_runs``) waits for the client to re-attach
    #: (``SessionStart.reattach_run_id``) before it fails; 0: no wait (it is cancelled, or
    #: fails at a restart, at once).
    session_reattach_s: float = 30.0
    default_automation_profile: str = "supervised"
    approvals: ApprovalSettings = field(default_factory=ApprovalSettings)
    automation_profiles: Mapping[str, AutomationProfile] = field(default_factory=dict)
    #: Limits per tool name, counted per origin: the sidecar's own tool, or each principal's
    #: client-hosted tool of that name.
    tool_limits: Mapping[str, ToolLimit] = field(default_factory=dict)
    #: Governance: the global ``[policy]`` and the named ``[policies.NAME]`` (see policies.py).
    policy: Policy = field(default_factory=Policy)
    policies: Mapping[str, Policy] = field(default_factory=dict)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    console: ConsoleSettings = field(default_factory=ConsoleSettings)
    tracing: bool = False
    auth: AuthSettings = field(default_factory=AuthSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)
    #: Named client identities (``[clients.NAME]``); the shared token, if set, is one more,
    #: ``default``, with every role.
    clients: Mapping[str, ClientConfig] = field(default_factory=dict)
    #: Directories (or glob patterns, ``*`` matching one path component) a run's
    #: ``sandbox_root`` must resolve inside; empty: no run may name one (see sandbox_roots.py).
    sandbox_roots: tuple[str, ...] = ()
    process: ProcessSettings = field(default_factory=ProcessSettings)
    #: Directories searched for ``tool_modules`` before ``sys.path`` (relative ones from the
    #: config file's directory); the config file's directory and the working directory always are.
    python_path: tuple[str, ...] = ()
    #: MCP servers whose tools the sidecar offers (``[mcp_servers.NAME]``, see config/mcp.py).
    mcp_servers: Mapping[str, McpServerConfig] = field(default_factory=dict)
    #: At most one warning per MCP server per this many seconds for lines it writes that are
    #: not JSON-RPC (the rest counted, and the count logged with the next).
    mcp_log_interval_s: float = 1.0

    def __init__(self, **settings: Any) -> None:
        given: dict[str, Any] = {}
        changes: dict[str, dict[str, Any]] = {}
        for name, value in settings.items():
            if (place := _PLACES.get(name)) is not None:
                changes.setdefault(place[0], {})[place[1]] = value
            elif name in _FIELDS:
                given[name] = value
            else:
                import difflib  # only when a name is wrong (2M instructions an import less)

                known = [*_PLACES, *_FIELDS]
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TypeError(f"SidecarConfig got an unknown setting {name!r}{hint}")
        for group, values in changes.items():
            given[group] = dataclasses.replace(given.get(group) or GROUPS[group](), **values)
        for spec in dataclasses.fields(SidecarConfig):
            if spec.name in given:
                value = given[spec.name]
            elif spec.default_factory is not dataclasses.MISSING:
                value = spec.default_factory()
            else:
                value = spec.default
            object.__setattr__(self, spec.name, value)
        self.__post_init__()

    def setting(self, name: str) -> Any:
        """The value of the setting called ``name`` (its TOML key); ``KeyError`` if none is."""
        if (place := _PLACES.get(name)) is not None:
            return getattr(getattr(self, place[0]), place[1])
        if name in _FIELDS and name not in GROUPS:
            return getattr(self, name)
        raise KeyError(name)

    def __post_init__(self) -> None:
        _check_listen(self.listen)
        setting, store, tls = self.setting, self.store, self.tls
        if self.process.parent_pid < 0 or self.process.ready_fd < 0:
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
            "console_max_streams",
        ):
            if setting(name) < 1:
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
            if not (setting(name) > 0 and math.isfinite(setting(name))):
                raise ConfigError(f"{name} must be a positive number of seconds")
        if self.limits.max_client_tool_timeout_s < self.limits.default_tool_timeout_s:
            raise ConfigError(
                "max_client_tool_timeout_s must be at least default_tool_timeout_s, which "
                "client tools without their own timeout get"
            )
        if store.ca_file and not store.url.startswith("rediss://"):
            raise ConfigError("event_store_ca_file is for a rediss:// event_store (Redis over TLS)")
        if bool(store.cert_file) != bool(store.key_file):
            raise ConfigError(
                "event_store_cert_file and event_store_key_file go together: set both or neither"
            )
        if not _KEY_PREFIX.fullmatch(store.key_prefix):
            raise ConfigError(
                f"event_store_key_prefix {store.key_prefix!r} must be 1 to 64 characters from "
                "A-Z a-z 0-9 _ . : - (no braces: they would move a Redis Cluster's hash slots)"
            )
        if store.cert_file and not store.url.startswith("rediss://"):
            raise ConfigError(
                "event_store_cert_file is for a rediss:// event_store (Redis over TLS)"
            )
        if not (self.session_reattach_s >= 0 and math.isfinite(self.session_reattach_s)):
            raise ConfigError("session_reattach_s must be 0 (no wait) or a number of seconds")
        if self.watching.queue_size < 1 or self.retention.max_runs < 0:
            raise ConfigError("watcher_queue_size must be >= 1 and max_finished_runs >= 0")
        if self.watching.window_bytes < 4096:
            raise ConfigError("watch_window_bytes must be at least 4096")
        if self.watching.window_bytes_per_identity < self.watching.window_bytes:
            raise ConfigError(
                "watch_window_bytes_per_identity must be at least watch_window_bytes (one "
                "watcher's window)"
            )
        if self.retention.max_bytes < 0:
            raise ConfigError("max_finished_run_bytes must be >= 0")
        if self.log_format not in ("json", "console"):
            raise ConfigError(f"log_format must be 'json' or 'console', not {self.log_format!r}")
        if self.default_profile not in self.all_profiles():
            raise ConfigError(f"default_profile {self.default_profile!r} is not a known profile")
        if bool(tls.cert_file) != bool(tls.key_file):
            raise ConfigError("tls_cert_file and tls_key_file go together: set both or neither")
        if tls.client_ca_file and not tls.cert_file:
            raise ConfigError(
                "tls_client_ca_file (mutual TLS) needs tls_cert_file and tls_key_file"
            )
        if self.default_automation_profile not in self.all_automation_profiles():
            raise ConfigError(
                f"default_automation_profile {self.default_automation_profile!r} is not a known "
                "automation profile"
            )
        if not (self.approvals.timeout_s > 0 and math.isfinite(self.approvals.timeout_s)):
            raise ConfigError("approval_timeout_s must be a positive number of seconds")
        unattended = self.approvals.unattended_timeout_s
        if not (unattended >= 0 and math.isfinite(unattended)):
            raise ConfigError(
                "approval_timeout_unattended_s must be 0 (decide at once) or more seconds"
            )
        if self.console.listen:
            _check_console_listen(self.console.listen)
        check_event_loop(self.process.event_loop)
        for root in self.sandbox_roots:
            if not isinstance(root, str) or not root.startswith("/") or "\x00" in root:
                raise ConfigError(f"sandbox_roots entries must be absolute paths, got {root!r}")
            literal = root.split("/")[1] if root.strip("/") else ""
            if not literal or any(c in literal for c in "*?["):
                raise ConfigError(
                    f"sandbox_roots entry {root!r} would allow every top-level directory (or "
                    "'/', the whole file system): begin it with a fixed directory"
                )
        if self.auth.token_env and self.auth.token_file:
            raise ConfigError("set auth_token_env or auth_token_file, not both")
        self._check_clients()
        self._check_policies()
        for name, server in self.mcp_servers.items():
            if server.name != name:
                raise ConfigError(f"mcp_servers.{name} is named {server.name!r}")
            server.check_max_timeout(self.limits.default_tool_timeout_s)

    def _check_clients(self) -> None:
        subjects: dict[frozenset[str], str] = {}
        for name, client in self.clients.items():
            if client.name != name:
                raise ConfigError(f"clients.{name} is named {client.name!r}")
            if client.subjects and not self.tls.client_ca_file:
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
        if self.auth.token_env or self.auth.token_file or not self.clients:
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


#: Where each grouped setting lives: its group's field on ``SidecarConfig``, and its own.
_PLACES: dict[str, tuple[str, str]] = {
    key: (path[0], path[1]) for key, path, _ in setting_fields(SidecarConfig) if len(path) == 2
}
#: The fields of ``SidecarConfig`` itself (the groups among them).
_FIELDS = frozenset(spec.name for spec in dataclasses.fields(SidecarConfig))


def _check_console_listen(listen: str) -> None:
    """``HOST:PORT`` (a browser cannot reach a unix socket)."""
    host, colon, port = listen.rpartition(":")
    if not (colon and host and port.isdigit() and int(port) <= _MAX_PORT):
        hint = f": did you mean 127.0.0.1:{listen}?" if listen.isdigit() else ""
        raise ConfigError(
            f"console_listen must be HOST:PORT (port 0 picks a free one), got {listen!r}{hint}"
        )


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
