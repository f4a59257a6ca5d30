"""Write the Go client as a Go module proxy serves it: ``make dist`` puts
``MODULE/@v/VERSION.{info,mod,zip}`` and ``MODULE/@v/list`` under ``dist/go``, the layout of a
``GOPROXY=file://...`` directory, so a Go project can take the tagged module from there as it
would from a proxy. The zip follows the module zip format (every path under
``MODULE@VERSION/``; no nested modules, no vendor directory).
"""

from __future__ import annotations

import argparse
import json
import re
import zipfile
from pathlib import Path

__all__ = ["main", "write_module"]

_MODULE = re.compile(r"^module\s+(\S+)", re.M)
#: Fixed so that two builds of one tree give the same zip.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def write_module(source: Path, version: str, proxy: Path) -> Path:
    """Write ``source`` (a directory holding go.mod) as ``version`` into ``proxy``; the zip."""
    gomod = (source / "go.mod").read_text(encoding="utf-8")
    match = _MODULE.search(gomod)
    if match is None:
        raise SystemExit(f"{source}/go.mod names no module")
    module = match.group(1)
    here = proxy / module / "@v"
    here.mkdir(parents=True, exist_ok=True)
    (here / f"{version}.mod").write_text(gomod, encoding="utf-8")
    (here / f"{version}.info").write_text(
        json.dumps({"Version": version, "Time": "2026-12-02T00:00:00Z"}) + "\n", encoding="utf-8"
    )
    (here / "list").write_text(version + "\n", encoding="utf-8")
    archive = here / f"{version}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(source.rglob("*")):
            relative = path.relative_to(source)
            if not path.is_file() or _left_out(source, relative):
                continue
            info = zipfile.ZipInfo(f"{module}@{version}/{relative.as_posix()}", _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    return archive


def _left_out(source: Path, relative: Path) -> bool:
    """What a module zip may not hold: vendor/, a nested module's files, editor leftovers."""
    parts = relative.parts
    if parts[0] == "vendor" or any(p.startswith(".") for p in parts):
        return True
    return any((source / Path(*parts[:i]) / "go.mod").exists() for i in range(1, len(parts)))


def main() -> None:
    """``python deploy/gomodule.py SOURCE VERSION PROXY_DIR``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("version")
    parser.add_argument("proxy", type=Path)
    args = parser.parse_args()
    print(write_module(args.source, args.version, args.proxy))


if __name__ == "__main__":
    main()
