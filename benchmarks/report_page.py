"""A benchmark's own report page for the documentation site: its tables and its plots,
dated, with the machine and the exact command that measured them.

Every benchmark that measures something a user would plot writes one with ``--page DIR``
(the site keeps its reports in ``docs/benchmarks/reports/``, where the build lists them by
themselves): ``<date>-<name>.md`` and a PNG per figure beside it. Every figure carries
the same caption as the page, so a figure copied elsewhere still says when, where and how
it was measured. A benchmark builds its ``Report`` from its figures alone (no Spark, no
clock), so its page can be drawn from any result, a made-up one included.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator


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
        figure.text(0.01, 0.005, provenance.caption, fontsize=7, color="0.35", va="bottom",
                    wrap=True)  # fmt: skip
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


CAPTION_INCHES = 0.3


def figure(rows: int = 1, height: float = 4.0) -> tuple[Figure, list[Axes]]:
    """A figure of ``rows`` plots one above the other, with room below for the caption
    (two lines, should a long command wrap)."""
    drawn = Figure(figsize=(9, height * rows), layout="constrained")
    engine = drawn.get_layout_engine()
    assert engine is not None
    caption = CAPTION_INCHES / (height * rows)
    engine.set(rect=(0, caption, 1, 1 - caption))
    axes = drawn.subplots(rows, 1, squeeze=False)[:, 0]
    return drawn, list(axes)


@dataclass(frozen=True)
class Report:
    """One measurement as its page shows it: the page's name (after its date) and title,
    its Markdown body and its figures by name."""

    name: str
    title: str
    body: str
    figures: dict[str, Figure]


def add_page_option(parser: argparse.ArgumentParser) -> None:
    """The ``--page DIR`` option every benchmark with a report page takes."""
    parser.add_argument(
        "--page", type=Path, metavar="DIR",
        help="also write a dated report page with plots into DIR, e.g. docs/benchmarks/reports",
    )  # fmt: skip


def publish(
    folder: Path | None, module: str, argv: list[str] | None, report: Report
) -> Path | None:
    """Write ``report``'s page into ``folder`` (nothing when None: no ``--page``), as
    measured now on this machine by ``python -m module`` with ``argv``; print its path."""
    if folder is None:
        return None
    provenance = Provenance.of_this_run(module, argv)
    page = write_page(folder, report.name, report.title, report.body, report.figures, provenance)
    print(f"report page: {page}")
    return page


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table: the first column left-aligned, the others right-aligned."""
    lines = [
        "| " + " | ".join(header) + " |",
        "|---|" + "---:|" * (len(header) - 1),
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def bar_chart(axes: Axes, values: dict[str, float], label: str, title: str) -> None:
    """Horizontal bars, one per entry of ``values``, in its order from the top."""
    names = list(values)[::-1]
    axes.barh(names, [values[name] for name in names], color="tab:blue")
    axes.set_xlabel(label)
    axes.set_title(title)


def line_chart(
    axes: Axes,
    series: dict[str, dict[float, float]],
    x_label: str,
    y_label: str,
    title: str,
    log_x: bool = False,
) -> None:
    """One line per entry of ``series`` (its points by x), marked at every point; a log
    x axis keeps its ticks at the points measured."""
    for name, points in series.items():
        xs = sorted(points)
        axes.plot(xs, [points[x] for x in xs], marker="o", label=name)
    if log_x:
        measured = sorted({x for points in series.values() for x in points})
        axes.set_xscale("log")
        axes.set_xticks(measured, [f"{x:,.0f}" if x == int(x) else f"{x:g}" for x in measured])
    else:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.set_ylim(bottom=0)
    axes.set_title(title)
    if len(series) > 1:
        axes.legend(fontsize=8)
