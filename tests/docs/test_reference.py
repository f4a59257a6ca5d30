"""The generated reference leaves nothing undocumented, and says what the code does: each
setting's key, variable and flag are checked against the real loader and parser, every flag of
every command has help, every RPC names its error statuses, every message, field and enum value
has a comment, and every metric has help and documented labels."""

from __future__ import annotations

import sys
from functools import reduce
from pathlib import Path
from typing import Any

import grpc
import pytest

from cleveragents.sidecar.cli import build_parser
from cleveragents.sidecar.config import SidecarConfig, load_config
from cleveragents.sidecar.config.groups import setting_fields

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs"))

from docsgen import cli, metrics, protocol, settings
from docsgen.hook import PAGES

SETTINGS = settings.rows()
#: A value of each type that differs from every default, to see a setting take it.
_SAMPLES = {"int": ("7", 7), "float": ("7.5", 7.5), "bool": ("true", True)}
#: Values a setting's own checks accept (its default would not show a change).
_VALID = {
    "listen": "127.0.0.1:7",
    "console_listen": "127.0.0.1:8",
    "log_format": "console",
    "log_level": "debug",
    "default_profile": "client",
    "default_automation_profile": "full_auto",
    "event_loop": "asyncio",
    "event_store": "runs.sqlite",
    "parent_pid": "1",
    "ready_fd": "7",
    "max_client_tool_timeout_s": "7200",
    "watch_window_bytes": "8192",
    "watch_window_bytes_per_identity": "2097152",
}
#: Settings that are only valid together with another one.
_NEEDS = {
    "tls_key_file": {"tls_cert_file": "c.pem"},
    "tls_cert_file": {"tls_key_file": "k.pem"},
    "event_store_cert_file": {"event_store_key_file": "k", "event_store": "rediss://h/0"},
    "event_store_key_file": {"event_store_cert_file": "c", "event_store": "rediss://h/0"},
    "event_store_ca_file": {"event_store": "rediss://h/0"},
    "tls_client_ca_file": {"tls_cert_file": "c", "tls_key_file": "k"},
    "auth_token_env": {},
    "default_tool_timeout_s": {"max_client_tool_timeout_s": "7200"},
}


def _value(config: SidecarConfig, path: tuple[str, ...]) -> Any:
    return reduce(getattr, path, config)


def test_every_setting_of_sidecarconfig_has_a_row_with_a_meaning() -> None:
    keys = {row.key for row in SETTINGS}
    names = {name for name, _, _ in setting_fields(SidecarConfig)}

    assert keys == names
    assert [row.key for row in SETTINGS if not row.doc.strip()] == []


def test_every_table_setting_names_the_page_that_explains_its_keys() -> None:
    tables = [row.key for row in SETTINGS if row.table]

    assert tables
    assert sorted(tables) == sorted(settings.TABLE_PAGES)


def _expected(row: settings.Setting, raw: str) -> Any:
    if row.type.startswith("list of"):
        return (raw,)
    if row.type == "bool":
        return True
    return int(raw) if row.type == "int" else float(raw) if row.type == "float" else raw


@pytest.mark.parametrize("row", [r for r in SETTINGS if not r.table], ids=lambda r: r.key)
def test_each_settings_variable_and_flag_set_it(row: settings.Setting) -> None:
    raw = _VALID.get(row.key) or _SAMPLES.get(row.type, ("x7", None))[0]
    if row.type.startswith("list of"):
        raw = {"sandbox_roots": "/srv/a", "tool_modules": "pkg.mod:registry"}.get(row.key, "/srv/b")
    env = {f"CLEVERAGENTS_SIDECAR_{k.upper()}": v for k, v in _NEEDS.get(row.key, {}).items()}
    env[row.env] = raw
    from_env = _value(load_config(env=env), row.path)
    flag = row.flag.split(", ")[0]
    argv = ["serve", flag] if row.type == "bool" else ["serve", flag, raw]
    from_flag = getattr(build_parser().parse_args(argv), row.key)

    assert row.env.startswith("CLEVERAGENTS_SIDECAR_")
    if row.key == "python_path":  # relative to the config file's directory, else as given
        assert from_env[0].endswith(raw)
    else:
        assert from_env == _expected(row, raw)
    assert from_flag in (_expected(row, raw), [raw])


def test_every_argument_of_every_command_has_help() -> None:
    commands = cli.commands()

    assert {c.name for c in commands} >= {
        "serve",
        "run",
        "watch",
        "cancel",
        "runs",
        "approve",
        "deny",
        "health",
    }
    assert [(c.name, a.names) for c in commands for a in c.arguments if not a.help.strip()] == []
    assert [c.name for c in commands if not (c.description or c.summary).strip()] == []


def test_every_rpc_names_the_statuses_it_answers_with() -> None:
    codes = {code.name for code in grpc.StatusCode}
    rpcs = protocol.rpcs()

    assert len(rpcs) >= 11
    assert [r.name for r in rpcs if not r.does or not r.errors] == []
    for rpc in rpcs:
        named = {word.strip(",.;():") for word in rpc.errors.split()} & codes
        assert named or rpc.errors.startswith("none of its own"), rpc.name


def test_every_message_field_and_enum_value_has_a_comment() -> None:
    missing: list[str] = []

    def walk(element: protocol.Element) -> None:
        if not element.comment.strip():
            missing.append(element.name)
        for child in element.children:
            walk(child)

    for element in protocol.elements():
        walk(element)
    assert missing == []


def test_every_metric_has_help_and_its_labels_are_documented() -> None:
    found = metrics.metrics()

    assert len(found) >= 15
    assert [m.name for m in found if not m.help.strip()] == []
    assert sorted({label for m in found for label in m.labels} - set(metrics.LABELS)) == []


def test_each_generated_page_names_what_it_documents() -> None:
    pages = {path: write() for path, write in PAGES.items()}

    assert all(f"`{row.key}`" in pages["reference/settings.md"] for row in SETTINGS)
    assert all(f"`{r.name}`" in pages["reference/protocol.md"] for r in protocol.rpcs())
    assert all(f"`{m.name}`" in pages["reference/metrics.md"] for m in metrics.metrics())
    assert all(f"## `{c.name}`" in pages["reference/cli.md"] for c in cli.commands())
