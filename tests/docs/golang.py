"""A Go project outside the repository that uses the Go client in module mode, offline.

With a module proxy a Go user runs ``go get``; here none is reachable, so the project is built
with ``-mod=vendor``: its ``vendor/`` holds the client's packages from the module zip
``make dist`` wrote (the module a proxy would serve for the tag) and the packages they import
from Debian's Go sources (/usr/share/gocode/src), which is what ``go mod vendor`` would copy,
and its ``go.mod`` requires the client at its version with a ``replace`` directive naming the
unpacked module, as a user of a local copy writes it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import zipfile
from pathlib import Path

__all__ = ["MODULE", "go_project"]

MODULE = "github.com/cleveragents/cleveragents-sidecar/client/go"
GOCODE = Path("/usr/share/gocode/src")
#: Versions the project's go.mod and vendor/modules.txt give Debian's copies (vendor mode
#: checks that the two agree; the go command fetches nothing).
_DEBIAN_VERSIONS = {
    "google.golang.org/grpc": "v1.33.3",
    "google.golang.org/protobuf": "v1.28.1",
    "github.com/golang/protobuf": "v1.5.2",
    "golang.org/x/net": "v0.7.0",
    "golang.org/x/sys": "v0.3.0",
    "golang.org/x/text": "v0.7.0",
    "google.golang.org/genproto": "v0.0.0-20200413000000-b5235f6b5235",
}


def _unpack(archive: Path, version: str, into: Path) -> Path:
    prefix = f"{MODULE}@{version}/"
    with zipfile.ZipFile(archive) as zf:
        for name in zf.namelist():
            assert name.startswith(prefix), name
            target = into / name.removeprefix(prefix)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))
    return into


def _module_of(directory: Path) -> tuple[str, Path]:
    """The module (path, root) that holds a package directory of Debian's sources."""
    for root in (directory, *directory.parents):
        if (root / "go.mod").is_file():
            return str(root.relative_to(GOCODE)), root
        if root == GOCODE:
            break
    raise AssertionError(f"no go.mod above {directory}")


def _go_version(gomod: Path) -> str:
    match = re.search(r"^go (\S+)", gomod.read_text(), re.M)
    return match.group(1) if match else "1.11"


def go_project(dist: Path, version: str, main_go: str, where: Path, go_env: dict[str, str]) -> Path:
    """Lay out a project using the client from ``dist/go``; its directory."""
    archive = dist / "go" / MODULE / "@v" / f"{version}.zip"
    client = _unpack(archive, version, where / "cleveragents-go")
    app = where / "app"
    app.mkdir()
    (app / "main.go").write_text(main_go)
    # The packages the client imports, found where GOPATH mode finds them (Debian's sources).
    listed = subprocess.run(
        [
            "go",
            "list",
            "-deps",
            "-f",
            "{{if not .Standard}}{{.ImportPath}} {{.Dir}}{{end}}",
            f"{MODULE}/sidecar",
        ],
        env=go_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    packages: dict[str, list[tuple[str, Path]]] = {}
    for line in filter(None, listed):
        path, directory = line.split(" ", 1)
        if path.startswith(MODULE):
            source = client / path.removeprefix(MODULE).lstrip("/")
            packages.setdefault(MODULE, []).append((path, source))
        else:
            module, _ = _module_of(Path(directory))
            packages.setdefault(module, []).append((path, Path(directory)))
    vendor = app / "vendor"
    lines, requires = [], []
    for module in sorted(packages):
        if module == MODULE:
            lines.append(f"# {module} {version} => ../cleveragents-go")
            lines.append(f"## explicit; go {_go_version(client / 'go.mod')}")
        else:
            lines.append(f"# {module} {_DEBIAN_VERSIONS[module]}")
            lines.append(f"## explicit; go {_go_version(GOCODE / module / 'go.mod')}")
        requires.append(f"\t{module} {version if module == MODULE else _DEBIAN_VERSIONS[module]}")
        for path, source in sorted(packages[module]):
            lines.append(path)
            target = vendor / path
            target.mkdir(parents=True)
            for file in source.iterdir():
                if file.is_file() and not file.name.endswith("_test.go"):
                    shutil.copy(file, target / file.name)
    lines.append(f"# {MODULE} => ../cleveragents-go")
    (vendor / "modules.txt").write_text("\n".join(lines) + "\n")
    (app / "go.mod").write_text(
        "module example.com/app\n\ngo 1.19\n\nrequire (\n" + "\n".join(requires) + "\n)\n\n"
        f"replace {MODULE} => ../cleveragents-go\n"
    )
    return app
