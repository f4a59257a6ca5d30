"""The settings reference: one row per setting of ``SidecarConfig``.

Every fact on a row comes from the code: the TOML key and the type and default from the
dataclass fields, the environment variable and the flag from the ``serve`` command's parser
(whose help names the variable), the meaning from the field's ``#:`` comment or else its
flag's help. ``rows`` is the one place that knows how the configuration is laid out: it walks
the groups of ``SidecarConfig`` too (``config.store.lease_s``), each setting under the one name
users meet it by (its TOML key, here ``event_store_lease_s``: a group field's metadata), and
``tests/docs/test_reference.py`` checks each row against the real loader and parser.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import textwrap
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cleveragents.sidecar.cli import build_parser
from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.config.mcp import McpServerConfig

__all__ = ["TABLE_PAGES", "Setting", "page", "rows"]

#: The names the settings' annotations use that their modules import for type checkers only
#: (so that a sidecar without MCP servers does not load their parser).
_DEFERRED_NAMES = {"McpServerConfig": McpServerConfig}

#: Each table setting (set in the TOML file only): the page that explains its keys, and what
#: it is when its field has no ``#:`` comment to say so.
TABLE_PAGES = {
    "profiles": "../how-to/providers.md",
    "clients": "../concepts/identities.md",
    "policy": "../concepts/identities.md#governance-policies",
    "policies": "../concepts/identities.md#governance-policies",
    "automation_profiles": "../concepts/approvals.md#automation-profiles",
    "tool_limits": "../concepts/budgets.md#tool-limits",
    "mcp_servers": "../how-to/mcp.md#every-key",
}
_TABLES = {
    "profiles": "LLM profiles, `[profiles.NAME]`: a provider (`openai`, `openai_responses`, "
    "`anthropic`), a script (`scripted`) or the client (`client`)",
    "automation_profiles": "automation profiles of your own, `[automation_profiles.NAME]`: "
    "which calls run, ask for approval, or are forbidden",
    "policies": "named governance policies, `[policies.NAME]`, for the identities that name them",
}
_ENV = re.compile(r"env (\w+)")


@dataclass(frozen=True)
class Setting:
    """One setting as a user meets it."""

    key: str  #: the TOML key (the setting's name, also its variable's and its flag's)
    path: tuple[str, ...]  #: the attribute path on ``SidecarConfig``
    type: str
    default: str
    doc: str
    env: str = ""  #: empty for a table, which lives in the file only
    flag: str = ""
    table: bool = False


def rows() -> list[Setting]:
    """Every setting, in the order ``SidecarConfig`` declares them."""
    flags = _serve_flags()
    return list(_walk(SidecarConfig, (), flags))


def _walk(
    cls: type[Any], prefix: tuple[str, ...], flags: dict[str, argparse.Action]
) -> Iterator[Setting]:
    hints = typing.get_type_hints(cls, localns=_DEFERRED_NAMES)
    comments = _field_comments(cls)  # tables have no flag: their comment says what they are
    for spec in dataclasses.fields(cls):
        path = (*prefix, spec.name)
        kind = hints[spec.name]
        if dataclasses.is_dataclass(kind) and spec.name not in TABLE_PAGES:
            yield from _walk(typing.cast(type[Any], kind), path, flags)
            continue
        key = spec.metadata.get("key", ".".join(path))
        action = flags.get(key)
        help_text = (action.help or "") if action else ""
        # The flag's help is written for users; a table's ``#:`` comment is all it has.
        doc = re.sub(r"\s*\(default: .*\)$", "", help_text) or _plain(
            comments.get(spec.name) or _TABLES.get(spec.name)
        )
        env = match.group(1) if (match := _ENV.search(help_text)) else ""
        yield Setting(
            key=key,
            path=path,
            type=_type_name(kind),
            default=_default(spec, bytes_="_bytes" in spec.name),
            doc=doc,
            env=env,
            flag=", ".join(action.option_strings) if action else "",
            table=spec.name in TABLE_PAGES,
        )


def _serve_flags() -> dict[str, argparse.Action]:
    """The ``serve`` command's options by their destination (the setting they set)."""
    parser = build_parser()
    # argparse has no public way to list a parser's arguments; _actions is what every
    # argparse documentation tool reads.
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = commands.choices["serve"]
    return {a.dest: a for a in serve._actions if a.option_strings}


def _field_comments(cls: type[Any]) -> dict[str, str]:
    """The ``#:`` comment lines above each field of ``cls``, joined (the attribute docstrings
    Sphinx reads)."""
    lines, _ = inspect.getsourcelines(cls)
    source = textwrap.dedent("".join(lines))
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    text = source.splitlines()
    found: dict[str, str] = {}
    for node in body.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above: list[str] = []
            index = node.lineno - 2
            while index >= 0 and text[index].strip().startswith("#:"):
                above.insert(0, text[index].strip().removeprefix("#:").strip())
                index -= 1
            if above:
                found[node.target.id] = " ".join(above)
    # Consecutive fields share one comment block: each gets the block above the first.
    return found


def _type_name(kind: Any) -> str:
    origin = typing.get_origin(kind)
    if origin is tuple:
        return "list of " + _type_name(typing.get_args(kind)[0])
    if origin is not None and "Mapping" in str(origin):
        return "table"
    if dataclasses.is_dataclass(kind):
        return "table"
    return getattr(kind, "__name__", str(kind))


def _plain(comment: str | None) -> str:
    """A ``#:`` comment as Markdown: reST's double backticks become single ones."""
    return (comment or "").replace("``", "`")


def _default(spec: dataclasses.Field[Any], *, bytes_: bool) -> str:
    if spec.default is not dataclasses.MISSING:
        value = spec.default
    elif spec.default_factory is not dataclasses.MISSING:
        value = spec.default_factory()
    else:  # pragma: no cover - every setting has a default
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if value in ("", (), {}) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return "unset" if value in ("", ()) else "see its page"
    if bytes_ and isinstance(value, int) and value >= 1024 and value % 1024 == 0:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value % size == 0:
                return f"{value} ({value // size} {unit})"
    return str(value)


def page() -> str:
    """The settings reference page, in Markdown."""
    out = [
        "# Settings",
        "",
        "Generated from `SidecarConfig` and the `serve` command's parser when the docs are",
        "built. Settings are read in this order, each source overriding the ones before it:",
        "the defaults below, the TOML file given by `--config` (or `CLEVERAGENTS_SIDECAR_CONFIG`),",
        "environment variables, then flags. Tables (`[profiles.NAME]`, `[clients.NAME]`...)",
        "live in the file only. A list setting's variable separates its items with `:`",
        "(`tool_modules`: with `,`); its flag is repeated.",
        "",
        "**Relative paths in the TOML file are from the file's directory**, wherever the",
        "sidecar is started: `auth_token_file`, `tls_cert_file`, `tls_key_file`,",
        "`tls_client_ca_file`, `event_store` (a file; a URL is left as it is),",
        "`event_store_ca_file`, `event_store_cert_file`, `event_store_key_file`, `ready_file`",
        "and `python_path`, and in the tables a client's `token_file`, a scripted profile's",
        "`script_file`, and an MCP server's `cwd`, a `command` with a `/` and, as the server",
        "runs in that directory by default, its `args`. The file's directory is on",
        "`python_path` too, so `tool_modules` beside the file import as they are. Paths given as",
        "environment variables or flags are relative to the working directory, as a shell's",
        "are, but for `python_path`, whose entries are from the file's directory whenever there",
        "is a file. `sandbox_roots` must be absolute.",
        "",
        "| TOML key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for row in rows():
        key = f"[`{row.key}`]({TABLE_PAGES[row.key]})" if row.table else f"`{row.key}`"
        out.append(f"| {key} | {row.type} | {_cell(row.default)} | {_cell(row.doc)} |")
    out += [
        "",
        "## Environment variables and flags",
        "",
        "| TOML key | environment variable | flag |",
        "|---|---|---|",
    ]
    for row in rows():
        if not row.table:
            out.append(f"| `{row.key}` | `{row.env}` | `{row.flag}` |")
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
