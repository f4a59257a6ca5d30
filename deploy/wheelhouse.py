"""Complete a wheel directory for the interpreter that will install from it.

``pip download --python-version X.Y.Z`` picks wheels by their tags for that Python but
evaluates the dependencies' environment markers for the Python running pip: on a 3.11.7 host,
``async-timeout; python_full_version < "3.11.3"`` (from ``redis``) is skipped, and the image's
3.11.2 then fails to install. This reads every wheel's requirements, evaluates their markers
(extras included) for the target interpreter, and downloads whatever is missing, until the
directory holds everything that interpreter will ask for.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

__all__ = ["missing", "target_environment"]


def target_environment(python: str) -> dict[str, str]:
    """The marker environment of CPython ``python`` (full version) on this machine's OS."""
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env.update(
        python_full_version=python,
        python_version=".".join(python.split(".")[:2]),
        implementation_version=python,
        implementation_name="cpython",
        platform_python_implementation="CPython",
        platform_machine=platform.machine(),
    )
    return env


def _requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(zf.read(name).decode("utf-8"))
    return [Requirement(text) for text in metadata.get_all("Requires-Dist") or []]


def missing(wheels: Path, roots: list[str], env: dict[str, str]) -> list[str]:
    """Requirements the target needs that no wheel in ``wheels`` provides."""
    by_name = {canonicalize_name(parse_wheel_filename(w.name)[0]): w for w in wheels.glob("*.whl")}
    extras: dict[str, set[str]] = {}
    wanted = [Requirement(r) for r in roots]
    seen: set[tuple[str, str]] = set()
    needed: list[str] = []
    while wanted:
        requirement = wanted.pop()
        name = canonicalize_name(requirement.name)
        for extra in {"", *requirement.extras}:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            wheel = by_name.get(name)
            if wheel is None:
                needed.append(str(requirement).split(";")[0])
                break
            extras.setdefault(name, set()).add(extra)
            for dependency in _requirements(wheel):
                marker = dependency.marker
                if marker is None or marker.evaluate({**env, "extra": extra}):
                    dependency.marker = None
                    wanted.append(dependency)
    return sorted(set(needed))


def main() -> None:
    """``python deploy/wheelhouse.py DIR PYTHON_FULL_VERSION ROOT... -- PIP_DOWNLOAD_FLAGS``."""
    argv = sys.argv[1:]
    flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", type=Path)
    parser.add_argument("python")
    parser.add_argument("roots", nargs="+")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    env = target_environment(args.python)
    for _ in range(10):
        needed = missing(args.wheels, args.roots, env)
        if not needed:
            return
        print("also for Python", args.python + ":", " ".join(needed))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--dest",
                str(args.wheels),
                *flags,
                *needed,
            ],
            check=True,
        )
    raise SystemExit(f"{args.wheels}: still missing after 10 rounds: {needed}")


if __name__ == "__main__":
    main()
