"""The newcomer's walls of ``serve``: a flag and help for every setting, a bare port, and
``tool_modules`` found next to the config file."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cleveragents.sidecar import ConfigError, SidecarConfig
from cleveragents.sidecar.cli import build_parser
from cleveragents.sidecar.cli.flags import LIST_FLAGS, TABLE_SETTINGS, add_setting_flags, overrides
from cleveragents.sidecar.config import load_config
from cleveragents.sidecar.config.groups import setting_fields
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
    flags = set(vars(serve_parser().parse_args([])))
    settings = {name for name, _, _ in setting_fields(SidecarConfig)}

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

    assert config.store.url == str(tmp_path / "runs.sqlite")
    assert config.auth.token_env == "MY_TOKEN"
    assert config.builtin_tools is False
    assert config.tool_modules == ("a:registry", "b")
    assert config.limits.default_tool_timeout_s == 5.0
    assert set(LIST_FLAGS) <= {name for name, _, _ in setting_fields(SidecarConfig)}


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


def test_relative_paths_in_the_config_file_are_from_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "sidecar.toml").write_text(
        'event_store = "runs.sqlite"\nready_file = "run/ready.json"\n'
        'auth_token_file = "secrets/token"\ntls_cert_file = "tls/cert.pem"\n'
        'tls_key_file = "/etc/absolute.key"\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)  # started from elsewhere

    config = load_config(project / "sidecar.toml", env={})

    assert config.store.url == str(project / "runs.sqlite")
    assert config.process.ready_file == str(project / "run" / "ready.json")
    assert config.auth.token_file == str(project / "secrets" / "token")
    assert config.tls.cert_file == str(project / "tls" / "cert.pem")
    assert config.tls.key_file == "/etc/absolute.key"


def test_relative_paths_from_variables_and_flags_stay_from_the_working_directory(
    tmp_path: Path,
) -> None:
    (tmp_path / "sidecar.toml").write_text('event_store = "redis://127.0.0.1:1/0"\n')
    env = {"CLEVERAGENTS_SIDECAR_READY_FILE": "ready.json"}

    config = load_config(tmp_path / "sidecar.toml", env=env, overrides={"event_store": "a.db"})

    assert (config.process.ready_file, config.store.url) == ("ready.json", "a.db")


def test_a_redis_event_store_in_the_config_file_is_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "sidecar.toml").write_text('event_store = "unix:///run/redis.sock?db=2"\n')

    assert load_config(tmp_path / "sidecar.toml", env={}).store.url == (
        "unix:///run/redis.sock?db=2"
    )


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("max_concurent_runs = 10", "unknown setting 'max_concurent_runs'; did you mean "
         "'max_concurrent_runs'?"),
        ('max_concurrent_runs = "ten"', "setting 'max_concurrent_runs' must be a whole number, "
         "got 'ten'"),
        ('tracing = "yes"', "setting 'tracing' must be true or false, got 'yes'"),
        ("shutdown_grace_s = [1]", "setting 'shutdown_grace_s' must be a number, got [1]"),
        ('[profiles.p]\nkind = "openai"\nbase_ulr = "http://x"',
         "profiles.p: unknown key(s) base_ulr; did you mean 'base_url'?; a profile of kind "
         "openai takes"),
    ],
    ids=["misspelt", "int", "bool", "float", "profile-key"],
)  # fmt: skip
def test_a_wrong_setting_says_what_was_meant(tmp_path: Path, toml: str, message: str) -> None:
    (tmp_path / "sidecar.toml").write_text(toml + "\n", encoding="utf-8")

    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path / "sidecar.toml", env={})

    assert str(raised.value).startswith(message)


def _project_with_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    (tmp_path / "wallmods").mkdir()
    (tmp_path / "wallmods" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "wallmods" / "tools.py").write_text(text, encoding="utf-8")
    monkeypatch.setattr("sys.path", list(sys.path))
    monkeypatch.setattr("sys.modules", dict(sys.modules))


def test_a_tool_module_without_the_attribute_names_its_registries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project_with_tools(tmp_path, monkeypatch, TOOLS.replace("registry", "my_tools"))
    (tmp_path / "sidecar.toml").write_text('tool_modules = ["wallmods.tools"]\n')

    with pytest.raises(ConfigError) as raised:
        default_registry(load_config(tmp_path / "sidecar.toml", env={}))

    module = tmp_path / "wallmods" / "tools.py"
    assert str(raised.value) == (
        f"tool module 'wallmods.tools': module 'wallmods.tools' ({module}) has no attribute "
        "'registry' (the attribute when none is given); its ToolRegistry objects: my_tools; "
        "name one as 'module:attribute'"
    )


def test_a_tool_module_attribute_that_is_no_registry_says_what_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project_with_tools(tmp_path, monkeypatch, TOOLS)
    (tmp_path / "sidecar.toml").write_text('tool_modules = ["wallmods.tools:shout"]\n')

    with pytest.raises(ConfigError, match=r"wallmods\.tools\.shout is a function, not a Tool"):
        default_registry(load_config(tmp_path / "sidecar.toml", env={}))


def test_a_tool_module_not_found_names_each_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sidecar.toml").write_text('tool_modules = ["nowhere_else.tools"]\n')
    monkeypatch.chdir(tmp_path)  # the config file's directory is the working directory
    monkeypatch.setattr("sys.path", list(sys.path))

    with pytest.raises(ConfigError) as raised:
        default_registry(load_config(tmp_path / "sidecar.toml", env={}))

    assert f"looked in {tmp_path} and sys.path" in str(raised.value)


def test_version_answers_without_importing_the_sidecar() -> None:
    # --version imported the whole server: 0.4 s on a quiet machine, over a second on a busy one.
    probe = (
        "import json, sys; from cleveragents.sidecar.cli import main; code = main(['--version']); "
        "print(json.dumps([code, sorted(m for m in sys.modules "
        "if m.startswith(('cleveragents', 'grpc', 'google')))]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    printed, loaded = done.stdout.splitlines()

    assert printed == f"cleveragents-sidecar {importlib.metadata.version('cleveragents-sidecar')}"
    assert json.loads(loaded) == [
        0, ["cleveragents", "cleveragents.sidecar", "cleveragents.sidecar.cli",
            "cleveragents.sidecar.cli.version"],
    ]  # fmt: skip


def test_the_package_still_offers_its_public_names_when_asked() -> None:
    probe = "import cleveragents.sidecar as s; print(s.Sidecar.__module__, s.load_config.__name__)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)

    assert done.stdout.split() == ["cleveragents.sidecar.transport.server", "load_config"]
