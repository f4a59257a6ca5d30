"""The container image builds here, offline, from the wheel and wheels resolved for the base
image's own Python, and its entrypoint passes ``cleveragents-sidecar health`` as the image's
user. It needs podman and a base image in local storage (``make image-rootfs`` makes one from
Debian's packages); without them it is skipped, saying which is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from .artifacts import ROOT, VERSION

BASE = os.environ.get("IMAGE_BASE", "localhost/cleveragents-rootfs:bookworm")


def _base_python() -> str:
    if shutil.which("podman") is None:
        pytest.skip("no image builder: podman is not installed (apt-get install podman)")
    found = subprocess.run(["podman", "image", "inspect", BASE], capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(f"no base image {BASE} in local storage: make image-rootfs makes one")
    env = json.loads(found.stdout)[0]["Config"].get("Env") or []
    versions = [e.split("=", 1)[1] for e in env if e.startswith("PYTHON_VERSION=")]
    assert versions, f"{BASE} does not say its PYTHON_VERSION"
    return str(versions[0])


@pytest.mark.timeout(900)  # the wheels' download (cached after the first) and the build
def test_the_image_builds_offline_and_its_entrypoint_is_healthy() -> None:
    python = _base_python()
    tag = f"localhost/cleveragents-sidecar-test:{VERSION}"
    # chroot isolation: the RUN steps start no container (which a builder inside a container
    # cannot), and still reach nothing, as the install takes only the local wheels.
    flags = "--isolation chroot --network host"
    built = subprocess.run(
        [
            "make",
            "-C",
            str(ROOT),
            "image",
            f"IMAGE={tag}",
            f"IMAGE_BASE={BASE}",
            f"IMAGE_PYTHON={python}",
            f"IMAGE_BUILD_FLAGS={flags or '--network none'}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    inspect = json.loads(
        subprocess.run(
            ["podman", "image", "inspect", tag], capture_output=True, text=True, check=True
        ).stdout
    )[0]
    assert inspect["Config"]["Labels"]["org.opencontainers.image.version"] == VERSION
    assert inspect["Config"]["User"] == "10001:10001"
    # Run the image's entrypoint as its user: podman run cannot start containers everywhere,
    # so chroot into a container's (writable) file system, with the image's environment.
    container = subprocess.run(
        ["podman", "create", tag], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        mounted = subprocess.run(["podman", "mount", container], capture_output=True, text=True)
        if mounted.returncode != 0:
            pytest.skip(f"the image built but cannot be mounted here to run it: {mounted.stderr}")
        root = mounted.stdout.strip()
        env = dict(e.split("=", 1) for e in inspect["Config"]["Env"])
        user = ["chroot", "--userspec=10001:10001", root, "cleveragents-sidecar"]
        serve = subprocess.Popen([*user, "serve"], env=env, stdout=subprocess.PIPE, text=True)
        try:
            assert serve.stdout is not None
            assert serve.stdout.readline().startswith("cleveragents-sidecar listening on unix:")
            health = subprocess.run(
                [*user, "health"], env=env, capture_output=True, text=True, timeout=60
            )
            assert health.returncode == 0, health.stderr
        finally:
            serve.terminate()
            serve.wait(timeout=30)
    finally:
        subprocess.run(["podman", "rm", "--force", container], capture_output=True)
