"""Which values the sidecar keeps out of tool records, and how a record is redacted."""

from __future__ import annotations

from cleveragents.sidecar import ProfileConfig, SidecarConfig
from cleveragents.sidecar.config.mcp import McpServerConfig
from cleveragents.sidecar.secrets import REDACTED, RedactingRunner, known_secrets
from cleveragents.tool import ToolCall, ToolRegistry


def test_the_secrets_are_the_token_the_profiles_keys_and_variables_named_like_secrets() -> None:
    config = SidecarConfig(profiles={"m": ProfileConfig("m", "openai", api_key_env="MY_LLM")})
    env = {
        "MY_LLM": "llm-key-value-1",
        "OPENAI_API_KEY": "openai-key-value-2",
        "DB_PASSWORD": "db-password-value-3",
        "GITHUB_TOKEN": "short",  # too short to be told from ordinary text
        "HOME": "/home/someone-with-a-long-name",
        "CLEVERAGENTS_SIDECAR_AUTH_TOKEN_ENV": "SIDECAR_TOKEN_VARIABLE",
    }

    secrets = known_secrets(config, ["the-auth-token-4"], env)

    assert set(secrets) == {
        "llm-key-value-1", "openai-key-value-2", "db-password-value-3", "the-auth-token-4",
    }  # fmt: skip


async def test_a_record_holding_a_secret_anywhere_in_its_output_or_error_is_redacted() -> None:
    registry = ToolRegistry()

    @registry.tool(description="Leak it.")
    def leak(where: str) -> dict[str, object]:
        if where == "error":
            raise RuntimeError("failed with sk-secret-value-9 in the message")
        return {"nested": [{"sk-secret-value-9": "x sk-secret-value-9 y"}], "n": 1}

    runner = RedactingRunner(registry, secrets=("sk-secret-value-9",))
    ok = await runner.run(ToolCall("c1", "leak", {"where": "output"}), iteration=1)
    failed = await runner.run(ToolCall("c2", "leak", {"where": "error"}), iteration=1)

    assert dict(ok.output) == {"nested": [{REDACTED: f"x {REDACTED} y"}], "n": 1}
    assert failed.error is not None
    assert "sk-secret-value-9" not in failed.error
    assert REDACTED in failed.error


def _nested(depth: int) -> object:
    value: object = "sk-secret-value-9"
    for _ in range(depth):
        value = [value]
    return value


async def test_a_deeply_nested_output_is_redacted_without_exhausting_the_stack() -> None:
    registry = ToolRegistry()

    @registry.tool(description="Nest it.")
    def nest(depth: int) -> dict[str, object]:
        return {"deep": _nested(depth)}

    runner = RedactingRunner(registry, secrets=("sk-secret-value-9",))
    record = await runner.run(ToolCall("c1", "nest", {"depth": 400}), iteration=1)

    assert record.success
    assert "sk-secret-value-9" not in str(record.output)
    assert REDACTED in str(record.output)


def test_a_variable_an_mcp_servers_headers_name_is_a_secret() -> None:
    docs = McpServerConfig("docs", url="http://127.0.0.1:1/mcp", headers={"X-Auth": "${DOCS_PASS}"})
    config = SidecarConfig(mcp_servers={"docs": docs})

    secrets = known_secrets(config, [], {"DOCS_PASS": "docs-pass-value-7", "HOME": "/home/x"})

    assert secrets == ("docs-pass-value-7",)
