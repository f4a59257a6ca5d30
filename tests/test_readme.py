"""The README is the front door: short, and every snippet in it is a docs quick start that the
artifact tests run (tests/docs/test_artifacts.py), so the front door cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.artifacts import quickstart

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
QUICK_STARTS = {
    "python": ("get-started/python.md", "python"),
    "js": ("get-started/node.md", "node"),
    "go": ("get-started/go.md", "go"),
    "sh": ("get-started/grpc.md", "grpc"),
}


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(README.splitlines()) <= 250


@pytest.mark.parametrize("language", sorted(QUICK_STARTS))
def test_each_snippet_of_the_readme_is_the_quick_start_the_tests_run(language: str) -> None:
    blocks = re.findall(rf"```{language}\n(.*?)```", README, re.S)
    code, _ = quickstart(*QUICK_STARTS[language])

    assert code in blocks


def test_the_files_the_readme_links_to_exist() -> None:
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert links
    assert [link for link in links if not (ROOT / link).exists()] == []
