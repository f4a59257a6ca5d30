"""Provider profiles in the TOML config, and how a run's selection resolves to a caller."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from cleveragents.providers import AnthropicMessagesCaller, OpenAIChatCaller
from cleveragents.sidecar import ConfigError, ProfileConfig, SidecarConfig, SidecarError
from cleveragents.sidecar.config import load_config
from cleveragents.sidecar.llm_profiles import resolve_llm
from cleveragents.tool import ToolFormat
from cleveragents.wire import LlmChoice

TOML = """
default_profile = "gpt"

[profiles.gpt]
kind = "openai"
model = "gpt-4o"
api_key_env = "MY_OPENAI_KEY"
timeout = 30
max_retries = 4

[profiles.gpt.params]
temperature = 0.2
max_tokens = 1024

[profiles.claude]
kind = "anthropic"
model = "claude-sonnet-4-5"
base_url = "https://anthropic.internal.example"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sidecar.toml"
    path.write_text(text, encoding="utf-8")
    return path


def selection(profile: str, model: str = "") -> LlmChoice:
    return LlmChoice(profile=profile, model=model)


def test_provider_profiles_load_from_toml(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, TOML), env={})

    assert config.profiles["gpt"] == ProfileConfig(
        "gpt",
        "openai",
        model="gpt-4o",
        api_key_env="MY_OPENAI_KEY",
        timeout_s=30.0,
        max_retries=4,
        params={"temperature": 0.2, "max_tokens": 1024},
    )


def test_unset_provider_keys_take_their_defaults(tmp_path: Path) -> None:
    claude = load_config(write(tmp_path, TOML), env={}).profiles["claude"]

    assert (claude.api_key_env, claude.timeout_s, claude.max_retries, claude.params) == (
        None,
        60.0,
        2,
        {},
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('script_file = "x.json"', "unknown key"),
        ('base_url = "api.openai.com"', "base_url must be an http"),
        ("timeout = 0", "timeout must be a positive"),
        ("max_retries = -1", "max_retries must be between"),
        ('api_key_env = "not a name"', "api_key_env must name an environment variable"),
        ('params = { messages = "x" }', "params may not set messages"),
        ("model = 4", "must be a string"),
    ],
)
def test_a_bad_provider_profile_is_a_config_error_naming_it(
    tmp_path: Path, extra: str, message: str
) -> None:
    text = f'[profiles.p]\nkind = "openai"\n{extra}\n'

    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text), env={})


def test_an_openai_profile_resolves_to_its_caller_and_router(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_OPENAI_KEY", "sk-x")
    profile = ProfileConfig("gpt", "openai", model="gpt-4o", api_key_env="MY_OPENAI_KEY")

    _, caller, router = resolve_llm(
        selection("gpt"), SidecarConfig(profiles={"gpt": profile}), client_llm=False
    )

    assert isinstance(caller, OpenAIChatCaller)
    assert caller.url == "https://api.openai.com/v1/chat/completions"
    assert router is not None
    assert router.format is ToolFormat.OPENAI


def test_an_anthropic_profile_takes_the_selected_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    profile = ProfileConfig("claude", "anthropic", model="claude-a")

    _, caller, router = resolve_llm(
        selection("claude", model="claude-b"),
        SidecarConfig(profiles={"claude": profile}),
        client_llm=False,
    )

    assert isinstance(caller, AnthropicMessagesCaller)
    assert caller.model == "claude-b"
    assert router is not None
    assert router.format is ToolFormat.ANTHROPIC


def test_the_default_key_variable_is_named_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = SidecarConfig(profiles={"gpt": ProfileConfig("gpt", "openai", model="gpt-4o")})

    with pytest.raises(SidecarError) as caught:
        resolve_llm(selection("gpt"), config, client_llm=False)

    assert caught.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert "$OPENAI_API_KEY" in caught.value.message


def test_an_empty_key_variable_name_means_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    local = ProfileConfig(
        "local", "openai", model="llama3", base_url="http://127.0.0.1:11434/v1", api_key_env=""
    )

    _, caller, _ = resolve_llm(
        selection("local"), SidecarConfig(profiles={"local": local}), client_llm=False
    )

    assert isinstance(caller, OpenAIChatCaller)


def test_a_provider_profile_without_any_model_is_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    config = SidecarConfig(profiles={"gpt": ProfileConfig("gpt", "openai")})

    with pytest.raises(SidecarError) as caught:
        resolve_llm(selection("gpt"), config, client_llm=False)

    assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "names no model" in caught.value.message


def test_scripted_profiles_still_get_no_router() -> None:
    _, _, router = resolve_llm(selection("scripted"), SidecarConfig(), client_llm=False)

    assert router is None


def test_a_key_that_cannot_go_in_a_header_is_refused_without_quoting_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-abc\u00e9def")
    config = SidecarConfig(profiles={"gpt": ProfileConfig("gpt", "openai", model="gpt-4o")})

    with pytest.raises(SidecarError) as caught:
        resolve_llm(selection("gpt"), config, client_llm=False)

    assert caught.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert "sk-abc" not in caught.value.message
    assert "characters a header cannot" in caught.value.message
