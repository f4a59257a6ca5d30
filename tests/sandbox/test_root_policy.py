"""The sandbox-root policy itself: which roots ``sandbox_roots`` entries and patterns allow,
and which settings are refused when the sidecar is configured."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest

from cleveragents.sidecar import ConfigError, SidecarConfig, SidecarError, load_config
from cleveragents.sidecar.sandbox_roots import SandboxRoots


def _policy(*roots: str) -> SandboxRoots:
    return SandboxRoots(SidecarConfig(sandbox_roots=roots), cwd="/")


def _refusal(policy: SandboxRoots, root: str) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(SidecarError) as raised:
        policy.resolve(root)
    return raised.value.code, raised.value.message


def test_a_pattern_allows_the_directories_it_matches_and_what_lies_below(tmp_path: Path) -> None:
    for name in ("alice", "bob", "other"):
        (tmp_path / "runs" / name / "src").mkdir(parents=True)
    policy = _policy(f"{tmp_path}/runs/[ab]*")

    assert policy.resolve(str(tmp_path / "runs" / "alice")) == str(tmp_path / "runs" / "alice")
    assert policy.resolve(str(tmp_path / "runs" / "bob" / "src"))
    assert (
        _refusal(policy, str(tmp_path / "runs" / "other"))[0] is grpc.StatusCode.PERMISSION_DENIED
    )
    assert "sandbox_roots" in _refusal(policy, str(tmp_path / "runs"))[1]


def test_a_plain_entry_allows_itself_and_its_subdirectories_only(tmp_path: Path) -> None:
    (tmp_path / "base" / "sub").mkdir(parents=True)
    (tmp_path / "base-two").mkdir()
    policy = _policy(str(tmp_path / "base"))

    assert policy.resolve(str(tmp_path / "base")) == str(tmp_path / "base")
    assert policy.resolve(str(tmp_path / "base" / "sub")) == str(tmp_path / "base" / "sub")
    assert "sandbox_roots" in _refusal(policy, str(tmp_path / "base-two"))[1]


def test_no_sandbox_roots_refuses_every_root_and_says_so(tmp_path: Path) -> None:
    code, message = _refusal(_policy(), str(tmp_path))

    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert "sandbox_roots (none)" in message


def test_a_root_holding_the_sidecars_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    token = tmp_path / "secrets" / "token"
    token.write_text("t0ken-t0ken\n")
    config = SidecarConfig(sandbox_roots=(str(tmp_path),), auth_token_file=str(token))

    code, message = _refusal(SandboxRoots(config, cwd="/"), str(tmp_path / "secrets"))

    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert "own token" in message


@pytest.mark.parametrize("entry", ["/", "//", "relative/dir", "./x"])
def test_sandbox_roots_entries_must_be_absolute_and_not_the_whole_file_system(entry: str) -> None:
    with pytest.raises(ConfigError, match="sandbox_roots"):
        SidecarConfig(sandbox_roots=(entry,))


def test_sandbox_roots_come_from_toml_lists_and_colon_separated_variables(tmp_path: Path) -> None:
    config_file = tmp_path / "sidecar.toml"
    config_file.write_text('sandbox_roots = ["/srv/a", "/srv/b/*"]\n')

    from_toml = load_config(config_file, env={})
    from_env = load_config(env={"CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS": "/srv/a:/srv/b/*"})

    assert from_toml.sandbox_roots == from_env.sandbox_roots == ("/srv/a", "/srv/b/*")


@pytest.mark.parametrize("entry", ["/*", "/?tc", "/[e]tc/x"])
def test_an_entry_that_would_allow_every_top_level_directory_is_refused(entry: str) -> None:
    with pytest.raises(ConfigError, match="every top-level directory"):
        SidecarConfig(sandbox_roots=(entry,))


def test_a_refused_root_is_told_in_the_clients_own_words_not_where_it_leads() -> None:
    code, message = _refusal(_policy("/tmp/allowed-nowhere"), "/proc/self/exe")

    assert code is grpc.StatusCode.FAILED_PRECONDITION
    assert os.path.realpath("/proc/self/exe") not in message
    assert "'/proc/self/exe' (its links followed)" in message
