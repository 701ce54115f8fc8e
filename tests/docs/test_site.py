"""The built site needs no network for its diagrams (the mermaid it loads is in the site),
and its Python API page documents every module of the application layer."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_serves_mermaid_itself() -> None:
    settings = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = re.search(r"^extra_javascript:\n((?:  - .+\n)+)", settings, re.MULTILINE)
    assert listed, "mkdocs.yml lists no extra_javascript"
    scripts = [line.split("- ", 1)[1] for line in listed.group(1).splitlines()]
    assert all("://" not in script for script in scripts), scripts
    (mermaid,) = [ROOT / "docs" / script for script in scripts if "mermaid" in script]
    # mkdocs-material loads mermaid from a CDN unless a global `mermaid` is defined.
    assert 'globalThis["mermaid"] =' in mermaid.read_text(encoding="utf-8")[-500:]
    assert (mermaid.parent / "mermaid-LICENSE.txt").read_text().startswith("The MIT License")


def test_the_python_api_page_documents_every_module_of_the_application_layer() -> None:
    page = (ROOT / "docs" / "reference" / "python-api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: (cdc_core\.app\.\w+)$", page, re.MULTILINE))
    modules = {f"cdc_core.app.{p.stem}" for p in (ROOT / "cdc_core" / "app").glob("[!_]*.py")}
    assert documented == modules
