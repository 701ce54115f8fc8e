"""The documentation site's build hooks (``hooks:`` in mkdocs.yml).

A page marks where a generated part goes with a line ``<!-- generated: NAME -->``; every
build replaces it with the part built from this checkout's code, so a reference page can
never fall behind the code. The benchmark reports under ``docs/benchmarks/reports/`` join
the navigation by themselves, newest first: a benchmark that writes its page adds it.
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
BENCHMARKS_SECTION = "Benchmarks"


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
    }


@cache
def generated(name: str) -> str:
    """The part ``name``, built once per build."""
    parts = generators()
    if name not in parts:
        raise ValueError(f"unknown generated part {name!r}; known: {sorted(parts)}")
    return parts[name]()


def on_config(config: Any) -> Any:
    """Add every benchmark report page to the Benchmarks section, newest first."""
    reports = sorted((Path(config["docs_dir"]) / REPORTS).glob("*.md"), reverse=True)
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and BENCHMARKS_SECTION in entry:
            entry[BENCHMARKS_SECTION].append(
                {"Reports": [f"{REPORTS}/{report.name}" for report in reports]}
            )
    return config


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each generated-part marker with the part."""
    return MARKER.sub(lambda match: generated(match.group(1)), markdown)
