"""`make go-tools` installs Debian's Go packages, or names them when it cannot."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_without_root_or_sudo_the_missing_go_packages_are_named(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "id").write_text("#!/bin/sh\necho 1000\n")  # not root
    (fake / "sudo").write_text("#!/bin/sh\nexit 1\n")  # and no password-less sudo
    for script in fake.iterdir():
        script.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")

    result = subprocess.run(
        ["make", "--no-print-directory", "go-tools", "GO=go-that-is-not-installed"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert result.returncode != 0
    assert (
        "the Go client needs Debian's golang-go protoc-gen-go protoc-gen-go-grpc" in result.stderr
    )
    assert "apt-get install golang-go" in result.stderr


def test_make_test_runs_the_go_checks_and_tests() -> None:
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "test"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip

    assert "gofmt -l client/go" in result.stdout
    assert "go vet ./..." in result.stdout
    assert "go test -count=1 -timeout 5m ./..." in result.stdout  # a hung test fails in minutes
