"""``[clients.NAME]`` settings: each identity's credentials, roles and policy, checked when
loaded, with an error that names the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from cleveragents.sidecar import ClientConfig, ConfigError, SidecarConfig, load_config
from cleveragents.sidecar.identity import DEFAULT_IDENTITY, Identity
from cleveragents.sidecar.transport.credentials import read_credentials
from tests.conftest import captured_logs


def load(tmp_path: Path, text: str) -> SidecarConfig:
    path = tmp_path / "sidecar.toml"
    path.write_text(text)
    return load_config(path, env={})


def test_a_clients_table_loads_roles_policy_and_a_token_file_beside_the_config(
    tmp_path: Path,
) -> None:
    (tmp_path / "ci.token").write_text("ci-token\n")
    config = load(tmp_path, """
[clients.ci]
token_file = "ci.token"
roles = ["observer", "approver"]
policy = "strict"

[policies.strict]
max_concurrent_runs = 2
""")  # fmt: skip
    credentials = read_credentials(config, env={})
    assert credentials.by_token(b"Bearer ci-token") == Identity(
        "ci", frozenset({"observer", "approver"}), "strict"
    )
    assert credentials.by_token(b"Bearer ci-token ") is None
    assert credentials.by_token(b"ci-token") is None


def test_the_shared_token_is_the_default_identity_with_every_role(tmp_path: Path) -> None:
    config = SidecarConfig(auth_token_env="SHARED")
    credentials = read_credentials(config, env={"SHARED": "one"})
    assert credentials.by_token(b"Bearer one") is DEFAULT_IDENTITY
    assert DEFAULT_IDENTITY.roles == {"observer", "approver", "admin"}


def test_an_inline_token_works_with_a_warning(tmp_path: Path) -> None:
    config = load(tmp_path, '[clients.dev]\ntoken = "dev-token-of-the-team"\n')
    with captured_logs() as logs:
        credentials = read_credentials(config, env={})
    assert credentials.by_token(b"Bearer dev-token-of-the-team") == Identity("dev")
    assert [(line["log_level"], line["client"]) for line in logs] == [("warning", "dev")]


def test_a_short_token_works_with_a_warning_naming_its_identity(tmp_path: Path) -> None:
    config = load(tmp_path, '[clients.dev]\ntoken_env = "DEV_TOKEN"\n')
    with captured_logs() as logs:
        credentials = read_credentials(config, env={"DEV_TOKEN": "abc"})
    assert credentials.by_token(b"Bearer abc") == Identity("dev")
    assert [(line["event"], line["identity"], line["characters"]) for line in logs] == [
        ("a token is too short to resist guessing", "dev", 3)
    ]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[clients.x]\nroles = ["root"]\ntoken = "t"', "clients.x.roles: unknown role(s) root"),
        ("[clients.x]\nroles = []", "clients.x has no credentials"),
        ('[clients.x]\ntoken_env = "A"\ntoken_file = "f"', "set one of token_env, token_file"),
        ('[clients.x]\ntoken = "t"\npolicy = 3', "clients.x.policy must be a string"),
        ('[clients.x]\ntoken = "t"\ncolour = "red"', "clients.x: unknown key(s) colour"),
        ('[clients.x]\nsubjects = ["CN=x"]', "clients.x.subjects needs mutual TLS"),
        ('[clients.default]\ntoken = "t"', "taken by the shared token's identity"),
        ('[clients.x]\ntoken_env = "1bad"', "clients.x.token_env must name an environment"),
    ],
)
def test_a_bad_client_table_is_refused_naming_the_setting(
    tmp_path: Path, table: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load(tmp_path, table)


def test_one_subject_for_two_identities_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"subject 'CN=x' is given to both clients\.a and"):
        SidecarConfig(
            tls_cert_file="server.pem",
            tls_key_file="server.key",
            tls_client_ca_file="ca.pem",
            clients={
                "a": ClientConfig("a", subjects=("CN=x",)),
                "b": ClientConfig("b", subjects=("CN=x",)),
            },
        )


def test_two_identities_with_one_token_are_refused() -> None:
    config = SidecarConfig(
        clients={"a": ClientConfig("a", token="same"), "b": ClientConfig("b", token="same")}
    )
    with pytest.raises(ConfigError, match="each identity needs its own token"):
        read_credentials(config, env={})


def test_an_unset_token_env_is_refused_at_start(tmp_path: Path) -> None:
    config = SidecarConfig(clients={"a": ClientConfig("a", token_env="NOT_SET_HERE")})
    with pytest.raises(ConfigError, match=r"clients\.a\.token_env names 'NOT_SET_HERE'"):
        read_credentials(config, env={})


def test_one_subject_written_two_ways_for_two_identities_is_refused() -> None:
    alice = ClientConfig("alice", subjects=("CN=alice,O=Acme",))
    ops = ClientConfig("ops", subjects=("O=Acme, CN=alice",), roles=frozenset({"admin"}))
    with pytest.raises(ConfigError, match=r"is given to both clients\.alice and clients\.ops"):
        SidecarConfig(
            tls_cert_file="server.pem",
            tls_key_file="server.key",
            tls_client_ca_file="ca.pem",
            clients={"alice": alice, "ops": ops},
        )
