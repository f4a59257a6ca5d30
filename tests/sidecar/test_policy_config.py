"""Governance policies from the TOML: the global ``[policy]``, named ``[policies.NAME]`` tables
that take the global values for what they leave out, and the mistakes refused at start-up."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cleveragents.sidecar import ConfigError, Policy, SidecarConfig, load_config

EXAMPLE = """
[policy]
automation_profiles = ["supervised", "read_only"]
llm_models = ["gpt-4o-mini"]
max_concurrent_runs = 4
runs_per_minute = 60

[policies.ci]
automation_profiles = ["*"]
allow_tool_shadowing = true
"""


def load(tmp_path: Path, text: str) -> SidecarConfig:
    path = tmp_path / "sidecar.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, env={})


def test_named_policy_takes_the_global_values_it_leaves_out(tmp_path: Path) -> None:
    config = load(tmp_path, EXAMPLE)

    assert config.policy == Policy(
        automation_profiles=("supervised", "read_only"),
        llm_models=("gpt-4o-mini",),
        max_concurrent_runs=4,
        runs_per_minute=60,
    )
    assert config.policy_named("ci") == Policy(
        "ci",
        automation_profiles=("*",),
        allow_tool_shadowing=True,
        llm_models=("gpt-4o-mini",),
        max_concurrent_runs=4,
        runs_per_minute=60,
    )


def test_the_docs_governance_example_loads_as_it_says(tmp_path: Path) -> None:
    page = Path(__file__).resolve().parents[2] / "docs/pages/concepts/identities.md"
    text = page.read_text(encoding="utf-8")
    match = re.search(r"<!-- readme-example: governance-toml -->\n```toml\n(.*?)```", text, re.S)
    assert match, "the docs' governance example is gone"

    config = load(tmp_path, match.group(1))

    assert not config.policy.allows("automation_profiles", "full_auto")
    assert not config.policy.allow_tool_shadowing
    assert config.policy_named("ci").allows("automation_profiles", "full_auto")
    assert config.policy_named("ci").allow_tool_shadowing
    assert config.policy_named("ci").llm_models == ("gpt-4o-mini", "gpt-4o-mini-*")
    assert config.policy_named("ci").runs_per_minute == 60


def test_defaults_allow_every_profile_and_model_but_no_shadowing_and_no_quota() -> None:
    policy = Policy()

    assert policy.allows("automation_profiles", "full_auto")
    assert policy.allows("llm_models", "any-model")
    assert (policy.allow_tool_shadowing, policy.max_concurrent_runs, policy.runs_per_minute) == (
        False,
        0,
        0,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[policy]\nmax_runs = 3\n", "policy: unknown key(s) max_runs"),
        ("[policies.ci]\nruns_per_minute = -1\n", "policies.ci.runs_per_minute must be 0"),
        ("[policy]\nllm_models = 'gpt-*'\n", "policy.llm_models must be a list of globs"),
        ("[policy]\nallow_tool_shadowing = 1\n", "policy.allow_tool_shadowing must be true"),
        ("[policies.ci]\nself_approval = 'no'\n", "policies.ci.self_approval must be true"),
        (
            "[policy]\nautomation_profiles = ['supervised', 'ful_auto']\n",
            "policy.automation_profiles: 'ful_auto' matches none of the configured",
        ),
        (
            "[policies.ci]\nautomation_profiles = ['full_auto']\n",
            "policies.ci.automation_profiles does not allow 'supervised', the "
            "default_automation_profile a run that names none gets",
        ),
        (
            "[policy]\nllm_profiles = ['client']\n",
            "policy.llm_profiles does not allow 'scripted', the default_profile",
        ),
    ],
)
def test_a_mistaken_policy_is_refused_at_start_naming_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        load(tmp_path, text)


def test_self_approval_is_on_unless_a_policy_turns_it_off(tmp_path: Path) -> None:
    config = load(tmp_path, "[policy]\n[policies.strict]\nself_approval = false\n")

    assert config.policy.self_approval is True
    assert config.policy_named("strict").self_approval is False


@pytest.mark.parametrize(
    ("text", "identity"),
    [
        ("[policy]\nself_approval = false\n", "'default'"),  # one shared identity, or none
        (
            "[policies.strict]\nself_approval = false\n"
            "[clients.alice]\ntoken_env = 'T_ALICE'\npolicy = 'strict'\n"
            "[clients.april]\ntoken_env = 'T_APRIL'\nroles = ['observer']\n",
            "'alice'",
        ),
    ],
)
def test_self_approval_off_with_nobody_else_to_decide_is_refused_at_start(
    tmp_path: Path, text: str, identity: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load(tmp_path, text)

    assert f"self_approval = false governs identity {identity}" in str(refused.value)
    assert "give another [clients.NAME] the approver or admin role" in str(refused.value)
