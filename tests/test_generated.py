"""The committed generated code matches what `make generate` produces from protos/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_code_is_in_step_with_protos(tmp_path: Path) -> None:
    protos = sorted(str(p.relative_to(ROOT / "protos")) for p in (ROOT / "protos").rglob("*.proto"))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(
        [
            sys.executable, "-m", "grpc_tools.protoc", "-I", str(ROOT / "protos"),
            f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}",
            f"--mypy_out={tmp_path}", f"--mypy_grpc_out={tmp_path}", *protos,
        ],
        check=True, cwd=ROOT, env=env, capture_output=True,
    )  # fmt: skip
    fresh = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    committed_root = ROOT / "generated"
    committed = {
        p.relative_to(committed_root): p.read_bytes()
        for p in committed_root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.name != "py.typed"
    }
    assert sorted(fresh) == sorted(committed), "run `make generate` and commit the result"
    stale = [str(path) for path, data in fresh.items() if committed[path] != data]
    assert not stale, f"generated code differs from protos/ in {stale}: run `make generate`"
