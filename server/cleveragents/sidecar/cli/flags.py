"""``serve``'s flags, one per setting, made from :class:`SidecarConfig` itself.

Made rather than written so that no setting lacks a flag, and each flag's help names its
default and its environment variable. Table settings (``profiles``, ``clients``,
``policies``…) have no flag: they live in the TOML file. List settings take a repeatable flag.
"""

from __future__ import annotations

import argparse
from typing import Any

from cleveragents.sidecar.config.groups import setting_fields
from cleveragents.sidecar.config.settings import ENV_PREFIX, SidecarConfig
from cleveragents.sidecar.eventloop import EVENT_LOOPS

__all__ = ["LIST_FLAGS", "TABLE_SETTINGS", "add_setting_flags", "overrides"]

#: Settings that are TOML tables: set in the config file only.
TABLE_SETTINGS = (
    "profiles", "automation_profiles", "tool_limits", "policy", "policies", "clients",
    "mcp_servers",
)  # fmt: skip
#: List settings and their repeatable flag (``--tool-module a:registry --tool-module b``).
LIST_FLAGS = {
    "tool_modules": "--tool-module",
    "sandbox_roots": "--sandbox-root",
    "python_path": "--python-path",
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "log_format": ("json", "console"),
    "event_loop": EVENT_LOOPS,
}
_HELP = {
    "listen": "host:port (port 0 picks one) or unix:/path",
    "log_format": "log line format",
    "log_level": "debug, info, warning or error",
    "max_concurrent_runs": "runs in flight at most",
    "max_message_bytes": "gRPC receive and send limit",
    "max_iterations_cap": "the highest max_iterations a run may ask for",
    "max_session_tools": "tools one Session may declare",
    "max_calls_per_response": "tool calls one LLM response may ask for",
    "max_schema_bytes": "the longest input_schema of a Session tool",
    "max_schema_depth": "the deepest nesting of a Session tool's schema",
    "max_schema_expansion": "subschemas a Session tool's schema may expand to",
    "max_validation_steps": "schema nodes times argument values one validation may visit",
    "default_tool_timeout_s": "seconds a tool without its own timeout gets",
    "client_llm_timeout_s": "seconds a Session run waits for its client's LLM answer",
    "max_client_tool_timeout_s": "the longest timeout a Session tool may declare",
    "finished_run_ttl_s": "seconds finished runs stay available",
    "max_finished_runs": "finished runs kept at most",
    "max_finished_run_bytes": "bytes of logs the finished runs kept may hold",
    "watcher_queue_size": "events a watcher may lag before it is dropped",
    "watcher_stall_s": "seconds a watcher that stopped reading is kept",
    "watch_window_bytes": "unacknowledged bytes a FollowRun watcher may have in flight",
    "watch_window_bytes_per_identity": "unacknowledged bytes one identity's FollowRun watchers "
    "may have in flight together",
    "allow_unacknowledged_watch": "serve WatchRun (FollowRun is always served)",
    "shutdown_grace_s": "seconds runs get to finish on SIGTERM/SIGINT",
    "builtin_tools": "serve the built-in echo and sleep tools",
    "file_tools": "serve the sandboxed file tools",
    "tool_modules": "a module:attribute naming a ToolRegistry to serve (repeatable)",
    "default_profile": "the LLM profile of runs that name none",
    "event_store": "a SQLite file or redis:// URL for the run logs (empty: memory)",
    "resume_runs": "with event_store: resume the detached runs live at a stop, from their logs",
    "event_store_password_env": "the environment variable holding the Redis password",
    "sidecar_id": "this sidecar's id on a shared Redis store (empty: random per start)",
    "event_store_lease_s": "seconds a sidecar's lease on a shared store lasts unrenewed",
    "event_store_ca_file": "with rediss://: the CA file the Redis server's certificate chains to",
    "event_store_cert_file": "with rediss://: this sidecar's client certificate for Redis (PEM)",
    "event_store_key_file": "the private key of event_store_cert_file (PEM)",
    "event_store_key_prefix": "what every key on the Redis store starts with (one per fleet)",
    "session_reattach_s": "seconds a Session run waits for its client to re-attach (0: none)",
    "default_automation_profile": "the automation profile of runs that name none",
    "approval_timeout_s": "seconds a call waits for approval while someone follows its run",
    "approve_on_timeout": "approve (not deny) a call whose approval timed out",
    "approval_timeout_unattended_s": "seconds a call waits for approval when nobody follows",
    "metrics_listen": "serve Prometheus metrics at http://HOST:PORT/metrics",
    "tracing": "trace runs with OpenTelemetry (exporter from the OTEL_* variables)",
    "auth_token_env": "the environment variable holding the shared token",
    "auth_token_file": "the file holding the shared token",
    "tls_cert_file": "serve TLS with this certificate (PEM)",
    "tls_key_file": "the TLS certificate's private key (PEM)",
    "tls_client_ca_file": "require client certificates signed by this CA (mutual TLS)",
    "auth_reject_log_interval_s": "seconds between 'credentials rejected' warnings",
    "sandbox_roots": "a directory or pattern a run's sandbox_root must be inside (repeatable)",
    "max_health_watchers": "health Watch streams open at once",
    "metrics_require_token": "with a token, GET /metrics needs it too",
    "console_listen": "serve the run console in the browser at http://HOST:PORT/",
    "console_max_streams": "live console streams (runs lists, run pages) open at once",
    "event_loop": "the event loop to serve on (auto: uvloop if installed)",
    "exit_with_parent": "exit (runs cancelled, store flushed) when the parent process dies",
    "parent_pid": "exit when this process dies (0: none; implies --exit-with-parent)",
    "ready_file": "once listening, write a JSON line {address, pid, version} to this file",
    "ready_fd": "once listening, write that JSON line to this inherited descriptor (0: none)",
    "python_path": "a directory to find tool_modules in (repeatable)",
    "mcp_log_interval_s": "seconds between an MCP server's 'not JSON-RPC' warnings",
}


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per non-table setting; a flag left out leaves the setting to the file/env."""
    for name, _, spec in setting_fields(SidecarConfig):
        if name in TABLE_SETTINGS:
            continue
        env = ENV_PREFIX + name.upper()
        default = _shown(spec.default if name not in LIST_FLAGS else ())
        text = f"{_HELP[name]} (default: {default}; env {env})"
        if name in LIST_FLAGS:
            parser.add_argument(
                LIST_FLAGS[name], dest=name, action="append", metavar="VALUE", help=text
            )
            continue
        flag = "--" + name.replace("_", "-")
        kind = str(spec.type)
        if kind == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=text)
        else:
            metavar = "SECONDS" if name.endswith("_s") else {"int": "N"}.get(kind, "VALUE")
            parser.add_argument(
                flag,
                type={"int": int, "float": float}.get(kind, str),
                metavar=None if name in _CHOICES else metavar,
                choices=_CHOICES.get(name),
                help=text,
            )


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags set (``None``: not given)."""
    return {
        name: getattr(args, name, None)
        for name, _, _ in setting_fields(SidecarConfig)
        if name not in TABLE_SETTINGS
    }


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value in ("", ()):
        return "unset"
    return str(value)
