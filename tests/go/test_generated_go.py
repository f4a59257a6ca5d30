"""The committed Go code under client/go matches what `make generate` produces from protos/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GO_OUT = ROOT / "client" / "go"
PLUGINS = ("protoc-gen-go", "protoc-gen-go-grpc")


def _go_files(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*.pb.go")}


def test_generated_go_code_is_in_step_with_protos(tmp_path: Path) -> None:
    missing = [plugin for plugin in PLUGINS if shutil.which(plugin) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not on PATH: `make go-tools` installs them (Debian)")
    buf = Path(sys.executable).parent / "buf"
    subprocess.run(
        [str(buf), "generate", "--template", "buf.gen.yaml", "-o", str(tmp_path)],
        check=True, cwd=ROOT, capture_output=True,
    )  # fmt: skip
    fresh = _go_files(tmp_path / "client" / "go")
    committed = _go_files(GO_OUT)
    assert fresh, "buf generate wrote no Go code: see buf.gen.yaml"
    assert sorted(fresh) == sorted(committed), "run `make generate` and commit the result"
    stale = [str(path) for path, data in fresh.items() if committed[path] != data]
    assert not stale, f"Go code differs from protos/ in {stale}: run `make generate`"
