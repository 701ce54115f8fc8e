"""The code blocks of the documentation's pages (and the README), with their language and
title, for the tests that hold the documentation to the code: config snippets, commands,
JSON shapes."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r'^(?P<indent>\s*)```(?P<language>[\w-]*)(?:\s+title="(?P<title>[^"]*)")?\s*$')


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block: where it is (page and first line), its language, its title (the
    ``title="..."`` of its fence, None without one) and its text."""

    page: Path
    line: int
    language: str
    title: str | None
    text: str

    @property
    def where(self) -> str:
        """``page:line``, for messages."""
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """Every page of the site, and the README."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def code_blocks(page: Path) -> list[CodeBlock]:
    """The fenced code blocks of ``page``, in order (an indented block, e.g. in a list
    item, loses its indentation)."""
    blocks = []
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == "```")
        text = textwrap.dedent("\n".join(lines[index + 1 : end])) + "\n"
        language, title = opening.group("language"), opening.group("title")
        blocks.append(CodeBlock(page, index + 1, language, title, text))
        index = end + 1
    return blocks


def all_blocks(*languages: str) -> list[CodeBlock]:
    """The code blocks of every page in one of ``languages``."""
    return [block for page in pages() for block in code_blocks(page)
            if block.language in languages]  # fmt: skip
