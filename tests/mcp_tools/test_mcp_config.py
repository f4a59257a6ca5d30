"""``[mcp_servers.NAME]`` from the operator's TOML: what each key means, and every mistake
refused at load with a message naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from cleveragents.sidecar import ConfigError, SidecarConfig, load_config
from cleveragents.sidecar.config.mcp import McpServerConfig, expand_env

EXAMPLE = """
[mcp_servers.time]
command = "mcp-server-time"
args = ["--local-timezone", "UTC"]
env = { TZ = "UTC" }
tools = ["get_*"]
timeout = 5
side_effects = false

[mcp_servers.docs]
url = "http://127.0.0.1:8931/mcp"
headers = { Authorization = "Bearer ${DOCS_TOKEN}" }
tool_prefix = ""
side_effects = "annotations"
startup = "lazy"
"""


def load(tmp_path: Path, text: str) -> SidecarConfig:
    path = tmp_path / "sidecar.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, env={})


def test_stdio_and_http_servers_load_with_their_keys(tmp_path: Path) -> None:
    servers = load(tmp_path, EXAMPLE).mcp_servers

    assert servers["time"] == McpServerConfig(
        "time",
        command="mcp-server-time",
        args=("--local-timezone", "UTC"),
        env={"TZ": "UTC"},
        cwd=str(tmp_path),  # the config file's directory: its relative args are from there
        tools=("get_*",),
        timeout_s=5.0,
        side_effects="false",
    )
    assert servers["time"].transport == "stdio"
    assert servers["time"].prefix == "time_"
    assert servers["docs"].transport == "http"
    assert servers["docs"].prefix == ""
    assert servers["docs"].startup == "lazy"
    assert servers["docs"].headers == {"Authorization": "Bearer ${DOCS_TOKEN}"}


def test_the_progress_settings_load_and_default_to_coalescing_without_extending(
    tmp_path: Path,
) -> None:
    text = (
        '[mcp_servers.a]\ncommand = "c"\n[mcp_servers.b]\ncommand = "c"\ntimeout = 30\n'
        "progress_interval = 0.25\nprogress_extends_timeout = true\nmax_timeout = 600\n"
    )
    servers = load(tmp_path, text).mcp_servers

    a, b = servers["a"], servers["b"]
    assert (a.progress_interval_s, a.progress_extends_timeout, a.max_timeout_s) == (
        1.0,
        False,
        None,
    )
    assert (b.progress_interval_s, b.progress_extends_timeout, b.max_timeout_s) == (0.25, True, 600)


def test_max_message_bytes_loads_and_defaults_to_64_mib(tmp_path: Path) -> None:
    text = (
        '[mcp_servers.a]\ncommand = "c"\n[mcp_servers.b]\ncommand = "c"\nmax_message_bytes = 2048\n'
    )
    servers = load(tmp_path, text).mcp_servers

    assert servers["a"].max_message_bytes == 64 * 1024 * 1024
    assert servers["b"].max_message_bytes == 2048


def test_no_mcp_servers_by_default() -> None:
    assert SidecarConfig().mcp_servers == {}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[mcp_servers.x]\nargs = ["a"]', "mcp_servers.x: set command (a stdio server) or url"),
        (
            '[mcp_servers.x]\ncommand = "c"\nurl = "http://h/mcp"',
            "mcp_servers.x: set command (a stdio server) or url",
        ),
        ('[mcp_servers.x]\nurl = "ftp://h/mcp"', "mcp_servers.x.url must be an http://"),
        ('[mcp_servers.x]\ncommand = "c"\nargs = "a b"', "mcp_servers.x.args must be a list"),
        ('[mcp_servers.x]\ncommand = "c"\nenv = { A = 1 }', "mcp_servers.x.env must be a table"),
        ('[mcp_servers.x]\ncommand = "c"\ntimeout = 0', "mcp_servers.x.timeout must be a pos"),
        ('[mcp_servers.x]\ncommand = "c"\ntimeout = "5s"', "mcp_servers.x.timeout must be a num"),
        ('[mcp_servers.x]\ncommand = "c"\nstartup = "now"', "mcp_servers.x.startup must be"),
        (
            '[mcp_servers.x]\ncommand = "c"\nside_effects = "maybe"',
            "mcp_servers.x.side_effects must be",
        ),
        ('[mcp_servers.x]\ncommand = "c"\ntool_prefix = "a b"', "mcp_servers.x.tool_prefix"),
        ('[mcp_servers.x]\ncommand = "c"\nport = 1', "mcp_servers.x: unknown key(s) port"),
        (
            '[mcp_servers.x]\ncommand = "c"\nheaders = { A = "b" }',
            "mcp_servers.x.headers are for a url",
        ),
        (
            '[mcp_servers.x]\nurl = "http://h/mcp"\nheaders = { A = "${1X}" }',
            "mcp_servers.x.headers.A: ${1X} does not name an environment variable",
        ),
        ('[mcp_servers."a.b"]\ncommand = "c"', "mcp_servers.a.b: a server's name is"),
        ("mcp_servers = 3", "mcp_servers must be a table"),
        (
            '[mcp_servers.x]\ncommand = "c"\nprogress_interval = -1',
            "mcp_servers.x.progress_interval must be a number of seconds, 0 or more",
        ),
        (
            '[mcp_servers.x]\ncommand = "c"\nprogress_extends_timeout = "yes"',
            "mcp_servers.x.progress_extends_timeout must be true or false",
        ),
        (
            '[mcp_servers.x]\ncommand = "c"\ntimeout = 10\nmax_timeout = 5',
            "mcp_servers.x.max_timeout (5) is below its timeout (10)",
        ),
        ('[mcp_servers.x]\ncommand = "c"\nmax_timeout = 0', "mcp_servers.x.max_timeout must be"),
        (
            '[mcp_servers.x]\ncommand = "c"\nmax_message_bytes = 100',
            "mcp_servers.x.max_message_bytes must be a whole number of bytes, at least 1024",
        ),
        (
            '[mcp_servers.x]\ncommand = "c"\nmax_message_bytes = "64MiB"',
            "mcp_servers.x.max_message_bytes must be a whole number of bytes",
        ),
        (
            '[mcp_servers.x]\nurl = "http://h/mcp"\nmax_message_bytes = 2048',
            "mcp_servers.x.max_message_bytes is for a command, not a url",
        ),
        (
            'default_tool_timeout_s = 120\n[mcp_servers.x]\ncommand = "c"\nmax_timeout = 30',
            "mcp_servers.x.max_timeout (30) is below default_tool_timeout_s (120)",
        ),
    ],
)
def test_a_mistaken_server_is_refused_at_load_naming_the_key(
    tmp_path: Path, table: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, table)

    assert message in str(caught.value)


def test_header_variables_come_from_the_environment_and_a_missing_one_names_the_key() -> None:
    headers = {"Authorization": "Bearer ${DOCS_TOKEN}"}

    assert expand_env(headers, "mcp_servers.docs.headers", {"DOCS_TOKEN": "s3"}) == {
        "Authorization": "Bearer s3"
    }
    with pytest.raises(ConfigError, match=r"mcp_servers\.docs\.headers\.Authorization uses"):
        expand_env(headers, "mcp_servers.docs.headers", {})
