"""One version: pyproject.toml's is the client's distribution's, the Node.js package's, the
one ``--version`` prints, the one the image is labelled with, and the newest the changelog
names after its unreleased section."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from .artifacts import ROOT, VERSION


def test_the_python_client_and_the_node_package_have_the_sidecars_version() -> None:
    client = tomllib.loads((ROOT / "client/python/pyproject.toml").read_text())["project"]
    node = json.loads((ROOT / "client/node/package.json").read_text())

    assert client["version"] == VERSION
    assert node["version"] == VERSION


def test_version_prints_the_installed_version() -> None:
    cli = Path(sys.executable).parent / "cleveragents-sidecar"
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True).stdout

    assert out.split() == ["cleveragents-sidecar", VERSION]


def test_the_image_is_tagged_and_labelled_with_the_version() -> None:
    makefile = (ROOT / "Makefile").read_text()
    containerfile = (ROOT / "Containerfile").read_text()

    assert "IMAGE ?= cleveragents-sidecar:$(VERSION)" in makefile
    assert "--build-arg VERSION=$(VERSION)" in makefile
    assert 'org.opencontainers.image.version="${VERSION}"' in containerfile


def test_the_changelog_names_the_version_and_the_compat_snapshot_exists() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    released = re.findall(r"^## (\d+\.\d+\.\d+)", changelog, re.M)

    assert released[0] == VERSION
    assert (ROOT / "tests" / "compat" / f"protos-v{VERSION}" / "buf.yaml").is_file()


def test_the_kubernetes_example_expects_the_versions_image() -> None:
    kustomization = (ROOT / "deploy/kubernetes/kustomization.yaml").read_text()
    deployment = (ROOT / "deploy/kubernetes/deployment.yaml").read_text()

    assert f"image: cleveragents-sidecar:{VERSION}" in deployment
    assert f'newTag: "{VERSION}"' in kustomization
