"""The documentation site's build hooks (``hooks:`` in mkdocs.yml).

A page marks where a generated part goes with a line ``<!-- generated: NAME -->``; every
build replaces it with the part built from this checkout's code, so a reference page can
never fall behind the code. The benchmark reports under ``docs/benchmarks/reports/`` join
the navigation by themselves, newest first (a benchmark that writes its page adds it),
and so do the design notes under ``docs/design/``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Document the code of this checkout, not an installed copy of the packages.
sys.path.insert(0, str(ROOT))

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
REPORTS = "benchmarks/reports"
NOTES = "design"


def generators() -> dict[str, Callable[[], str]]:
    """Each generated part by the name a page's marker gives it."""
    from docgen import (
        checks_reference,
        cli_reference,
        config_reference,
        failures_reference,
        tables_reference,
    )

    return {
        "config-reference": config_reference.markdown,
        "cli-reference": cli_reference.markdown,
        "tables-reference": tables_reference.markdown,
        "failures-reference": failures_reference.markdown,
        "checks-reference": checks_reference.markdown,
        "benchmark-reports": lambda: page_list(REPORTS, "benchmarks"),
        "design-notes": lambda: page_list(NOTES, "design"),
    }


@cache
def generated(name: str) -> str:
    """The part ``name``, built once per build."""
    parts = generators()
    if name not in parts:
        raise ValueError(f"unknown generated part {name!r}; known: {sorted(parts)}")
    return parts[name]()


def on_config(config: Any) -> Any:
    """Add every benchmark report (as Benchmarks > Reports) and every design note to the
    navigation, newest first."""
    docs = Path(config["docs_dir"])
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and "Benchmarks" in entry:
            entry["Benchmarks"].append({"Reports": dated_pages(docs, REPORTS)})
        if isinstance(entry, dict) and "Design notes" in entry:
            entry["Design notes"].extend(dated_pages(docs, NOTES))
    return config


def dated_pages(docs: Path, folder: str) -> list[str]:
    """The pages of ``folder`` whose names start with their date, newest first."""
    names = sorted((p.name for p in (docs / folder).glob("2*.md")), reverse=True)
    return [f"{folder}/{name}" for name in names]


def page_list(folder: str, page_folder: str) -> str:
    """A list linking every dated page of ``folder`` by its title, newest first, for a page
    in ``page_folder``."""
    docs = ROOT / "docs"
    items = []
    for path in dated_pages(docs, folder):
        text = (docs / path).read_text(encoding="utf-8")
        title = next(line[2:] for line in text.splitlines() if line.startswith("# "))
        items.append(f"- [{title}]({Path(path).relative_to(page_folder)})")
    return "\n".join(items) + "\n"


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each generated-part marker with the part."""
    return MARKER.sub(lambda match: generated(match.group(1)), markdown)
