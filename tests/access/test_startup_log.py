"""What a real ``serve`` says at start about who may do what: whether callers authenticate,
the identities and their roles, the directories runs may work in; and a short token warned of."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.conftest import SANDBOX_ROOTS_ENV

if TYPE_CHECKING:
    from tests.conftest import ServeSidecar


def start_log(serve_sidecar: ServeSidecar, *flags: str, **settings: object) -> list[Any]:
    """The JSON log lines a sidecar writes until it listens."""
    served = serve_sidecar("--log-format", "json", "--log-level", "info", *flags,
                           stderr=subprocess.PIPE, **settings)  # fmt: skip
    assert served.process.stderr is not None
    lines = []
    for line in served.process.stderr:
        lines.append(json.loads(line))
        if lines[-1].get("event") == "sidecar listening":
            return lines
    raise AssertionError(f"the sidecar never logged that it listens: {lines}")


def test_the_start_line_says_auth_is_off_and_which_roots_runs_may_use(
    serve_sidecar: ServeSidecar,
) -> None:
    [*_, listening] = start_log(serve_sidecar)

    assert listening["auth"] == "off (every caller is 'default', with every role)"
    assert listening["identities"] == {"default": ["admin", "approver", "observer"]}
    assert listening["tls"] == "off"
    assert listening["sandbox_roots"] == [os.environ[SANDBOX_ROOTS_ENV]]


def test_the_start_line_names_the_identities_and_a_short_token_is_warned_of(
    serve_sidecar: ServeSidecar, tmp_path: Path
) -> None:
    config = tmp_path / "sidecar.toml"
    config.write_text(
        '[clients.olga]\ntoken_env = "TEST_OLGA_TOKEN"\nroles = ["observer"]\n', encoding="utf-8"
    )
    env = {"TEST_SHARED_TOKEN": "abc", "TEST_OLGA_TOKEN": "olga-token-long-enough",
           SANDBOX_ROOTS_ENV: ""}  # fmt: skip
    logged = start_log(serve_sidecar, "--config", str(config), env=env,
                       auth_token_env="TEST_SHARED_TOKEN")  # fmt: skip
    listening = logged[-1]
    warnings = [e for e in logged if e.get("event") == "a token is too short to resist guessing"]

    assert listening["auth"] == "token"
    assert listening["identities"] == {
        "default": ["admin", "approver", "observer"],
        "olga": ["observer"],
    }
    assert listening["sandbox_roots"] == "none (no run may name a sandbox_root)"
    assert [(w["identity"], w["characters"], w["level"]) for w in warnings] == [
        ("default", 3, "warning")
    ]
