"""The Makefile tells a newcomer what is wrong with the machine instead of failing obscurely."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_venv_whose_python_is_gone_is_rebuilt(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(tmp_path / "python3.9-that-was-removed")

    result = make("-n", "install", f"VENV={venv}")

    assert "or its Python is gone: rebuilding it" in result.stdout
    assert not venv.exists()
    assert f"-m venv {venv}" in result.stdout


def test_a_working_venv_is_kept() -> None:
    result = make("-n", "install")

    assert "rebuilding" not in result.stdout
    assert (ROOT / ".venv" / "bin" / "python").exists()


def test_node_tests_without_npm_name_what_is_missing() -> None:
    result = make("node-test", "NPM=npm-that-is-not-installed")

    assert result.returncode != 0
    assert "needs Node.js 20+ and npm" in result.stderr
    assert "apt-get install nodejs npm" in result.stderr


def test_the_redis_tests_without_redis_server_name_what_is_missing() -> None:
    result = make("redis-server", "REDIS_SERVER=redis-server-not-here", "REDIS_INSTALL=false")

    assert result.returncode != 0
    assert "need redis-server 7+" in result.stderr
    assert "apt-get install redis-server" in result.stderr


def test_the_browser_tests_without_chromium_name_what_is_missing() -> None:
    result = make("browser", "CHROMIUM=chromium-not-here", "BROWSER_INSTALL=false")

    assert result.returncode != 0
    assert "needs Debian's chromium and chromium-driver" in result.stderr
    assert "apt-get install chromium chromium-driver" in result.stderr


def test_every_test_runner_in_make_test_bounds_each_test() -> None:
    """A hung test fails its runner in minutes, naming it, instead of hanging make test."""
    recipe = make("-n", "test").stdout.splitlines()

    go_test = [line for line in recipe if " go test " in line]
    assert go_test, "make test runs go test"
    assert all(re.search(r" -timeout \d+[smh]", line) for line in go_test)
    assert any(line.endswith("npm test") for line in recipe)
    node = ROOT / "client" / "node"
    assert json.loads((node / "package.json").read_text())["scripts"]["test"] == "node test/run.js"
    runner = (node / "test" / "run.js").read_text()
    assert "`--test-timeout=${FILE_TIMEOUT_MS}`" in runner  # each file as a whole
    assert "path.join(here, 'guard.js')" in runner  # each test, and a handle left at the end
    assert any(" -m pytest " in line for line in recipe)
    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    assert pytest_options["ini_options"]["timeout"] > 0
