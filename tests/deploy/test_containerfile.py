"""The Containerfile refers to what exists: the console script the wheel installs, the
``health`` command (run here, with the image's environment, against a sidecar started as the
image starts it), the wheels ``make image`` prepares, and a user of its own. The image itself
is built by ``make image`` only, never by the tests."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path, PurePosixPath

from .conftest import ROOT, run_cli, served, without_sidecar_settings


def instructions() -> list[tuple[str, str]]:
    """The Containerfile's instructions, ``(KEYWORD, arguments)``, continuations joined."""
    text = (ROOT / "Containerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, arguments = line.strip().partition(" ")
            found.append((keyword.upper(), arguments.strip()))
    return found


def the(keyword: str) -> str:
    """The arguments of the last ``keyword`` (the one that counts in the final stage)."""
    return [arguments for k, arguments in instructions() if k == keyword][-1]


def image_env() -> dict[str, str]:
    env = {}
    for name, value in re.findall(r"(\w+)=(\S+)", the("ENV")):
        env[name] = value
    return env


def healthcheck() -> tuple[dict[str, str], list[str]]:
    """The HEALTHCHECK's options and its command."""
    options, _, command = the("HEALTHCHECK").partition("CMD ")
    parsed = dict(re.findall(r"--([\w-]+)=(\S+)", options))
    return parsed, json.loads(command)


def seconds(duration: str) -> float:
    assert duration.endswith("s"), duration
    return float(duration.removesuffix("s"))


def test_the_entrypoint_is_the_console_script_the_wheel_installs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    assert json.loads(the("ENTRYPOINT")) == ["cleveragents-sidecar"]
    assert "cleveragents-sidecar" in project["scripts"]
    assert json.loads(the("CMD")) == ["serve"]
    # The build installs this project by name, from the wheels make image prepares.
    [install] = [a for k, a in instructions() if k == "RUN" and "pip install" in a]
    installed = shlex.split(install.split("pip install", 1)[1].split("&&")[0])
    assert installed[-1] == project["name"]
    assert {"--no-index", "--find-links"} <= set(installed)


def test_the_build_copies_only_the_wheels_make_image_prepares() -> None:
    makefile = (ROOT / "Makefile").read_text()
    [wheels] = re.findall(r"^IMAGE_WHEELS := (\S+)$", makefile, re.M)
    [copy] = [a for k, a in instructions() if k == "COPY" and "--from" not in a]
    ignore = [
        line for line in (ROOT / ".containerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]  # fmt: skip

    assert copy.split()[0] == f"{wheels}/"
    assert ignore == ["*", f"!{wheels}/"]  # the build context is those wheels alone
    dry_run = subprocess.run(
        ["make", "--no-print-directory", "-n", "image", "CONTAINER_BUILD=podman build"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert f"--wheel-dir {wheels} ." in dry_run
    assert "--format docker" in dry_run  # OCI images have no HEALTHCHECK
    assert "-f Containerfile" in dry_run


def test_the_image_runs_as_a_user_of_its_own() -> None:
    uid, gid = the("USER").split(":")
    [run] = [a for k, a in instructions() if k == "RUN" and "useradd" in a]

    assert int(uid) > 0
    assert int(gid) > 0
    assert f"groupadd --system --gid {gid} cleveragents" in run
    assert f"useradd --system --uid {uid} --gid {gid}" in run


def test_the_socket_directory_is_a_volume_the_user_owns() -> None:
    socket = PurePosixPath(image_env()["CLEVERAGENTS_SIDECAR_LISTEN"].removeprefix("unix:"))
    uid, gid = the("USER").split(":")
    [run] = [a for k, a in instructions() if k == "RUN" and "useradd" in a]

    assert json.loads(the("VOLUME")) == [str(socket.parent)]
    assert re.search(rf"install -d -o {uid} -g {gid} -m 0755 .*{socket.parent}", run)


def test_the_health_check_gives_the_command_time_to_answer() -> None:
    options, command = healthcheck()

    assert command[:2] == ["cleveragents-sidecar", "health"]
    assert seconds(options["timeout"]) > float(command[command.index("--timeout") + 1])


async def test_the_health_check_passes_against_the_sidecar_as_the_image_starts_it(
    tmp_path: Path,
) -> None:
    """ENTRYPOINT + CMD with the image's ENV (the socket's directory moved to ``tmp_path``),
    then the HEALTHCHECK's command with the same ENV."""
    socket = image_env()["CLEVERAGENTS_SIDECAR_LISTEN"].removeprefix("unix:")
    env = {k: v for k, v in image_env().items() if k != "PATH"}
    env["CLEVERAGENTS_SIDECAR_LISTEN"] = f"unix:{tmp_path / PurePosixPath(socket).name}"
    env = without_sidecar_settings({**env, "CLEVERAGENTS_SIDECAR_FILE_TOOLS": "false"})
    entrypoint = json.loads(the("ENTRYPOINT")) + json.loads(the("CMD"))

    async with served(entrypoint[1:], env):
        _, command = healthcheck()
        status, out, err = await run_cli(*command[1:], env=env)

    assert (status, out) == (0, f"{env['CLEVERAGENTS_SIDECAR_LISTEN']}: SERVING\n"), err
