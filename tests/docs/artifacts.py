"""What the artifact tests share: the files ``make dist`` wrote, clean environments with them
installed, and the quick starts as the docs print them.

An environment is made once per artifact (named by the artifact's SHA-256, under
build/artifact-envs) and reused while the artifact is unchanged: each holds that artifact and
what it installs, nothing from the repository. A file lock keeps two test workers from making
the same one at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
DOCS = ROOT / "docs" / "pages"
ENVS = ROOT / "build" / "artifact-envs"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
#: The address every quick start names; the tests put their sidecar's in its place.
DOCS_ADDRESS = "127.0.0.1:50051"
#: pip, run with the tests' own Python into another environment (``--python``), so that a
#: clean environment needs no pip of its own.
PIP = [sys.executable, "-m", "pip"]


def artifact(pattern: str) -> Path:
    """The one file of ``dist/`` matching ``pattern`` (``make dist`` writes them)."""
    found = sorted(DIST.glob(pattern))
    assert len(found) == 1, f"dist/{pattern}: {found or 'nothing'}; run make dist first"
    return found[0]


def quickstart(page: str, name: str) -> tuple[str, str]:
    """The code block after ``<!-- quickstart: NAME -->`` on ``page`` and the output block
    after ``<!-- quickstart-output: NAME -->``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    code = re.search(rf"<!-- quickstart: {name} -->\n```\w+\n(.*?)```", text, re.S)
    shown = re.search(rf"<!-- quickstart-output: {name} -->\n```\w+\n(.*?)```", text, re.S)
    assert code, f"{page}: the {name} quick start is gone"
    assert shown, f"{page}: the {name} quick start's output is gone"
    return code.group(1), shown.group(1)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(name: str) -> Iterator[Path]:
    ENVS.mkdir(parents=True, exist_ok=True)
    with open(ENVS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield ENVS / name


def python_env(wheel: Path) -> Path:
    """A virtual environment holding ``wheel`` and its dependencies (from the package index,
    or pip's cache), made with no pip of its own; its directory."""
    with _locked(f"{wheel.stem}-{_digest(wheel)}") as env:
        if not (env / ".complete").exists():
            shutil.rmtree(env, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
            subprocess.run(
                [
                    *PIP,
                    "--python",
                    str(env / "bin" / "python"),
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    str(wheel),
                ],
                check=True,
                capture_output=True,
            )
            (env / ".complete").touch()
        return env


def node_project(tarball: Path) -> Path:
    """An npm project with nothing but the tarball installed; its directory."""
    with _locked(f"node-{_digest(tarball)}") as project:
        if not (project / ".complete").exists():
            shutil.rmtree(project, ignore_errors=True)
            project.mkdir()
            (project / "package.json").write_text('{"name": "app", "private": true}\n')
            subprocess.run(
                [
                    "npm",
                    "install",
                    "--silent",
                    "--no-audit",
                    "--no-fund",
                    "--ignore-scripts",
                    str(tarball),
                ],
                cwd=project,
                check=True,
                capture_output=True,
            )
            (project / ".complete").touch()
        return project


def clean_env(**extra: str) -> dict[str, str]:
    """The environment a user's shell would have: no PYTHONPATH, no sidecar settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "PYTHONPATH" and not k.startswith(("CLEVERAGENTS_SIDECAR_", "VIRTUAL_ENV"))
    }
    env.update(extra)
    return env
