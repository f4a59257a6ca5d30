"""Where a stdio MCP server's command and paths are found, against a real ``serve`` started
as the tour starts it: ``.venv/bin/cleveragents-sidecar`` with that directory not on ``PATH``,
from a working directory other than the config file's."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from cleveragents.client import SidecarClient

from .conftest import FAULTS, WAIT_S

CLI = str(Path(sys.executable).parent / "cleveragents-sidecar")
#: Without the sidecar's own bin directory: a shell whose venv was never activated.
BARE_PATH = "/usr/local/bin:/usr/bin:/bin"
_LISTENING = "cleveragents-sidecar listening on "


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """The working directory the sidecar is started from: not the config file's."""
    path = tmp_path / "elsewhere"
    path.mkdir()
    return path


def serve(config: Path, cwd: Path) -> Iterator[str]:
    """``serve --config config`` from ``cwd`` with ``BARE_PATH``; yields its address."""
    process = subprocess.Popen(
        [CLI, "serve", "--config", str(config), "--listen", "127.0.0.1:0",
         "--log-level", "warning", "--no-file-tools"],
        cwd=cwd, env={"PATH": BARE_PATH}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        line = process.stdout.readline().strip()
        if not line.startswith(_LISTENING):
            process.kill()
            _, err = process.communicate(timeout=WAIT_S)
            raise AssertionError(f"serve did not start: {line!r}; stderr: {err}")
        yield line.removeprefix(_LISTENING)
    finally:
        process.terminate()
        process.wait(WAIT_S)


def test_a_bare_command_is_found_in_the_sidecars_own_environment_when_not_on_path(
    tmp_path: Path, elsewhere: Path
) -> None:
    assert shutil.which("mcp-server-time", path=BARE_PATH) is None  # the tour's situation
    config = tmp_path / "sidecar.toml"
    config.write_text(
        '[mcp_servers.time]\ncommand = "mcp-server-time"\nargs = ["--local-timezone", "UTC"]\n',
        encoding="utf-8",
    )
    for address in serve(config, elsewhere):
        with SidecarClient(address) as client:
            names = {spec.name for spec in client.list_tools()}

    assert "time_get_current_time" in names


def test_relative_args_and_cwd_of_a_server_are_from_the_config_files_directory(
    tmp_path: Path, elsewhere: Path
) -> None:
    project = tmp_path / "project"
    (project / "servers").mkdir(parents=True)
    (project / "marks").mkdir()
    shutil.copy(FAULTS, project / "servers" / "faults.py")
    config = project / "sidecar.toml"
    config.write_text(
        f'[mcp_servers.f]\ncommand = "{sys.executable}"\nargs = ["servers/faults.py"]\n'
        'env = { FAULT_DIR = "marks" }\n'  # relative to the server's cwd: the project
        '\n[mcp_servers.g]\ncommand = "servers/faults.py"\ncwd = "servers/sub"\n'
        'env = { FAULT_DIR = "../../marks" }\n',
        encoding="utf-8",
    )
    (project / "servers" / "sub").mkdir()
    script = project / "servers" / "faults.py"
    script.write_text(f"#!{sys.executable}\n" + script.read_text(encoding="utf-8"))
    script.chmod(0o755)
    for address in serve(config, elsewhere):
        with SidecarClient(address) as client:
            names = {spec.name for spec in client.list_tools()}

    assert {"f_echo", "g_echo"} <= names
    assert len(list((project / "marks").glob("pid-*"))) == 2


def test_a_command_found_nowhere_fails_start_naming_where_it_looked(
    tmp_path: Path, elsewhere: Path
) -> None:
    config = tmp_path / "sidecar.toml"
    config.write_text('[mcp_servers.x]\ncommand = "no-such-mcp-server"\n', encoding="utf-8")
    done = subprocess.run(
        [CLI, "serve", "--config", str(config), "--listen", "127.0.0.1:0"],
        cwd=elsewhere, env={"PATH": BARE_PATH}, capture_output=True, text=True, timeout=WAIT_S * 3,
    )  # fmt: skip

    assert done.returncode == 2
    assert done.stdout == ""
    own = sysconfig.get_path("scripts")
    assert done.stderr.strip().splitlines()[-1] == (
        "cleveragents-sidecar: MCP server 'x' (mcp_servers.x, startup = \"eager\") could not "
        "start with command 'no-such-mcp-server': CommandNotFoundError: 'no-such-mcp-server' "
        f"is not on PATH ({BARE_PATH}) nor in the sidecar's own environment ({own}): install "
        "it into one of them, or give the command's absolute path"
    )
