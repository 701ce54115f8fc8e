"""A benchmark's own report page for the documentation site: its tables and its plots,
dated, with the machine and the exact command that measured them.

``benchmarks.bench`` and ``benchmarks.age`` write one with ``--page DIR`` (the site keeps
its reports in ``docs/benchmarks/reports/``, where the build lists them by themselves):
``<date>-<name>.md`` and a PNG per figure beside it. Every figure carries the same
caption as the page, so a figure copied elsewhere still says when, where and how it was
measured.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from matplotlib.figure import Figure


def machine() -> str:
    """The CPU model, cores and memory, as Linux reports them (``platform`` elsewhere)."""
    try:
        cpu = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        memory = Path("/proc/meminfo").read_text(encoding="utf-8")
    except OSError:
        return f"{platform.platform()}, {os.cpu_count()} cores"
    model = re.search(r"^model name\s*:\s*(.+)$", cpu, re.MULTILINE)
    total = re.search(r"^MemTotal:\s*(\d+) kB", memory, re.MULTILINE)
    gib = f", {int(total.group(1)) / (1 << 20):.0f} GiB RAM" if total else ""
    return f"{model.group(1) if model else platform.processor()}, {os.cpu_count()} cores{gib}"


@dataclass(frozen=True)
class Provenance:
    """When, where and how a measurement was made."""

    measured: datetime
    machine: str
    command: str

    @classmethod
    def of_this_run(cls, module: str, argv: list[str] | None) -> Provenance:
        """This process's measurement: now, this machine, ``python -m module`` with the
        arguments it was given."""
        arguments = sys.argv[1:] if argv is None else argv
        return cls(datetime.now(UTC), machine(), f"python -m {module} {shlex.join(arguments)}")

    @property
    def caption(self) -> str:
        """One line: the date and time (UTC), the machine, the command."""
        return f"{self.measured:%Y-%m-%d %H:%M} UTC · {self.machine} · {self.command}"


def write_page(
    folder: Path,
    name: str,
    title: str,
    body: str,
    figures: dict[str, Figure],
    provenance: Provenance,
) -> Path:
    """Write ``<folder>/<date>-<name>.md``: ``title`` with the date, how it was measured,
    each figure (captioned with ``provenance``, saved beside the page as PNG), then
    ``body`` (Markdown). Returns the page's path."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{provenance.measured:%Y-%m-%d}-{name}"
    images = []
    for key, figure in figures.items():
        figure.text(0.01, 0.005, provenance.caption, fontsize=7, color="0.35", va="bottom")
        png = folder / f"{stem}-{key}.png"
        figure.savefig(png, dpi=100)
        images.append(f"![{key}]({png.name})")
    page = folder / f"{stem}.md"
    page.write_text(
        f"# {title}, {provenance.measured:%Y-%m-%d}\n\n"
        f'!!! info "How it was measured"\n'
        f"    {provenance.measured:%Y-%m-%d %H:%M} UTC on {provenance.machine}: "
        f"`{provenance.command}`\n\n" + "\n\n".join(images) + "\n\n" + body.strip() + "\n",
        encoding="utf-8",
    )
    return page


def figure(rows: int = 1, height: float = 4.0) -> tuple[Figure, list]:
    """A figure of ``rows`` plots one above the other, with room below for the caption."""
    drawn = Figure(figsize=(9, height * rows), layout="constrained")
    drawn.get_layout_engine().set(rect=(0, 0.03, 1, 0.97))
    axes = drawn.subplots(rows, 1, squeeze=False)[:, 0]
    return drawn, list(axes)
