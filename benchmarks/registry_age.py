"""What reading the dump registry costs a run, by the source's age.

A service registers a dump a minute; retire archives the ones wholly bound, so after
``days`` the registry holds ``days * 1440`` files, all but the last day's retired, folded
as maintenance leaves it (``fold_registry``). For each age it writes such a registry
(through delta-rs, as registration does; no Spark) and times what a run asks of it:

    python -m benchmarks.registry_age --days 1 30 365

- ``every file``: ``Registry.files()``, objects for every file (rebuild, a full check);
- ``first read``: a run's first ``files(reaching=...)`` in a fresh process: both Delta
  tables read but their folded files, objects for the files at or above the run's
  offsets and live ones with errors (one window's dump here);
- ``again``: the same call on the same handle, tables unchanged (a run asks several
  times).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from benchmarks.report_page import Report, add_page_option, figure, line_chart, publish, table
from cdc_core.ingest.registry import FILES_SCHEMA, RETIRED_SCHEMA, Registry, fold_registry

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000
PER_FILE = 12  # records per one-minute dump
DAY = 1_440


def write_registry(root: Path, days: int) -> Registry:
    """A registry of one dump a minute for ``days``, all but the last day retired."""
    n = days * DAY
    columns = {
        "path": [f"/landing/users/{i:07d}.json" for i in range(n)],
        "size": [1_000] * n, "mtime_ms": [T0 + i * MINUTE for i in range(n)],
        "arrival_ms": [T0 + i * MINUTE for i in range(n)], "partition": [0] * n,
        "min_offset": [i * PER_FILE for i in range(n)],
        "max_offset": [i * PER_FILE + PER_FILE - 1 for i in range(n)],
        "min_ts": [T0 + i * MINUTE for i in range(n)],
        "max_ts": [T0 + i * MINUTE + MINUTE - 1 for i in range(n)],
        "records": [PER_FILE] * n, "damaged_lines": [0] * n, "problem": [None] * n,
        "bad_lines": [0] * n,
    }  # fmt: skip
    registry = Registry(root, "users")
    write_deltalake(registry.files_path, pa.table(columns, FILES_SCHEMA))
    retired = n - DAY
    write_deltalake(registry.retired_path, pa.table({
        "path": columns["path"][:retired], "retired_ms": [T0 + n * MINUTE] * retired,
        "archived_to": [None] * retired,
    }, RETIRED_SCHEMA))  # fmt: skip
    fold_registry(registry)  # as maintenance leaves it
    return registry


def timed(call) -> tuple[float, int]:
    """Seconds a call took and how many files it returned."""
    began = time.perf_counter()
    files = call()
    return time.perf_counter() - began, len(files)


@dataclass(frozen=True)
class Reads:
    """One age's registry reads: its files, the seconds of each read, and how many files
    the first read built."""

    days: int
    files: int
    every: float
    first: float
    again: float
    built: int

    @property
    def line(self) -> str:
        """The age's report line."""
        return (f"{self.days:>5} {self.files:>8} {self.every:>10.2f}s {self.first:>10.2f}s "
                f"{self.again:>6.3f}s   ({self.built} file(s) built)")  # fmt: skip


def measure(days: int) -> Reads:
    """The reads of a registry ``days`` old."""
    with tempfile.TemporaryDirectory() as workdir:
        root = Path(workdir) / "dumps"
        write_registry(root, days)
        reaching = {0: (days * DAY - 1) * PER_FILE}  # the last minute's dump waits
        registry = Registry(root, "users")
        first, needed = timed(lambda: registry.files(reaching=reaching))
        again, _ = timed(lambda: registry.files(reaching=reaching))
        every, total = timed(lambda: Registry(root, "users").files())
    return Reads(days, total, every, first, again, needed)


def page_report(ages: list[Reads]) -> Report:
    """The report page: each read's seconds against the registry's age."""
    drawn, (axes,) = figure()
    line_chart(axes, {
        "every file": {r.days: r.every for r in ages},
        "first read": {r.days: r.first for r in ages},
        "again": {r.days: r.again for r in ages},
    }, "days of one dump a minute", "seconds", "reading the dump registry", log_x=True)  # fmt: skip
    body = "\n\n".join([
        "A registry of one dump a minute, all but the last day retired and folded as "
        "maintenance leaves it; a run's reads of it (see the module's docstring).",
        table(["days", "files", "every file s", "first read s", "again s", "files built"],
              [[r.days, f"{r.files:,}", f"{r.every:.2f}", f"{r.first:.2f}", f"{r.again:.3f}",
                r.built] for r in ages]),
    ])  # fmt: skip
    return Report("registry-age", "Reading the dump registry by age", body, {"registry": drawn})


def main(argv: list[str] | None = None) -> None:
    """Print one line per age."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, nargs="+", default=[1, 30, 365])
    add_page_option(parser)
    args = parser.parse_args(argv)
    print(f"{'days':>5} {'files':>8} {'every file':>11} {'first read':>11} {'again':>7}")
    ages = []
    for days in args.days:
        ages.append(measure(days))
        print(ages[-1].line, flush=True)
    publish(args.page, "benchmarks.registry_age", argv, page_report(ages))


if __name__ == "__main__":
    main()
