"""What the wheel ships besides code: the PEP 561 marker that tells type checkers to use the
package's own annotations."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def typed_packages() -> list[Path]:
    """The packages the wheel holds that a user imports: the namespace's regular packages,
    and the generated code's package (plain modules in a namespace directory)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    roots = config["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    packages = [
        p for root in roots for p in (ROOT / root).iterdir() if (p / "__init__.py").exists()
    ]
    return [*packages, ROOT / "generated/cleveragents/toolruntime/v1"]


def test_every_package_in_the_wheel_is_marked_typed() -> None:
    packages = typed_packages()

    assert len(packages) >= 7
    assert [p for p in packages if not (p / "py.typed").is_file()] == []
