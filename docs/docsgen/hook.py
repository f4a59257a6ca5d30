"""The MkDocs hook (``hooks:`` in docs/mkdocs.yml) that adds the generated reference pages to
the site before it is built, so that the pages are always those of the code being built."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docs/, for docsgen

from docsgen import cli, metrics, protocol, settings

#: Each generated page: its path in the site and what writes it.
PAGES: dict[str, Callable[[], str]] = {
    "reference/settings.md": settings.page,
    "reference/cli.md": cli.page,
    "reference/protocol.md": protocol.page,
    "reference/metrics.md": metrics.page,
}


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site's files."""
    from mkdocs.structure.files import File

    for path, write in PAGES.items():
        files.append(File.generated(config, path, content=write()))
    return files
