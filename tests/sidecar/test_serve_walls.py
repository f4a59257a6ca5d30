"""The newcomer's walls of ``serve``: a flag and help for every setting, a bare port, and
``tool_modules`` found next to the config file."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import pytest

from cleveragents.sidecar import ConfigError, SidecarConfig
from cleveragents.sidecar.cli import build_parser
from cleveragents.sidecar.cli.flags import LIST_FLAGS, TABLE_SETTINGS, add_setting_flags, overrides
from cleveragents.sidecar.config import load_config
from cleveragents.sidecar.tool_sources import default_registry

TOOLS = '''
from cleveragents.tool import ToolRegistry

registry = ToolRegistry()


@registry.tool
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()
'''


def serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_setting_flags(parser)
    return parser


def test_a_bare_port_asks_which_address_was_meant() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 127\.0\.0\.1:50051 .* or \[::\]:50051"):
        SidecarConfig(listen="50051")


def test_every_setting_but_the_tables_has_a_flag() -> None:
    flags = {a.dest for a in serve_parser()._actions}
    settings = {f.name for f in dataclasses.fields(SidecarConfig)}

    assert settings - set(TABLE_SETTINGS) <= flags


def test_serve_help_shows_each_default_and_environment_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())

    assert (
        "--event-store VALUE a SQLite file or redis:// URL for the run logs (empty: memory) "
        "(default: unset;" in text
    )
    assert "--max-concurrent-runs N runs in flight at most (default: 1000; env " in text
    assert "CLEVERAGENTS_SIDECAR_AUTH_TOKEN_ENV" in text
    assert "--tls-cert-file" in text
    assert "--default-profile" in text


def test_flags_set_the_settings_that_had_none(tmp_path: Path) -> None:
    args = serve_parser().parse_args(
        [
            "--event-store", str(tmp_path / "runs.sqlite"), "--auth-token-env", "MY_TOKEN",
            "--no-builtin-tools", "--tool-module", "a:registry", "--tool-module", "b",
            "--default-tool-timeout-s", "5",
        ]
    )  # fmt: skip
    config = load_config(None, env={}, overrides=overrides(args))

    assert config.event_store == str(tmp_path / "runs.sqlite")
    assert config.auth_token_env == "MY_TOKEN"
    assert config.builtin_tools is False
    assert config.tool_modules == ("a:registry", "b")
    assert config.default_tool_timeout_s == 5.0
    assert set(LIST_FLAGS) <= {f.name for f in dataclasses.fields(SidecarConfig)}


def test_tool_modules_import_from_the_config_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    (project / "walltools").mkdir(parents=True)
    (project / "walltools" / "__init__.py").write_text("", encoding="utf-8")
    (project / "walltools" / "tools.py").write_text(TOOLS, encoding="utf-8")
    (project / "sidecar.toml").write_text(
        'tool_modules = ["walltools.tools:registry"]\nfile_tools = false\n', encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)  # elsewhere, with no PYTHONPATH
    monkeypatch.setattr("sys.path", [p for p in sys.path if p not in ("", str(tmp_path))])

    registry = default_registry(load_config(project / "sidecar.toml", env={}))

    assert "shout" in registry


def test_a_tool_module_not_found_names_where_it_was_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sidecar.toml").write_text(
        'tool_modules = ["nowhere_project.tools:registry"]\npython_path = ["lib"]\n',
        encoding="utf-8",
    )
    monkeypatch.setattr("sys.path", list(sys.path))
    config = load_config(tmp_path / "sidecar.toml", env={})

    with pytest.raises(ConfigError) as raised:
        default_registry(config)

    message = str(raised.value)
    assert message.count("tool module") == 1  # not doubled
    assert "No module named 'nowhere_project'" in message
    assert f"looked in {tmp_path / 'lib'}, {tmp_path}, {os.getcwd()} and sys.path" in message
    assert "python_path" in message
