"""Smoke test of the benchmark: every contender runs at a tiny size and lands in the table.

Beyond that, the rows each contender reports are checked against a plain-Python reading
of the same dumps (json + gzip, no Spark): the floor counts every dump line, and the
upsert contenders end with one row per key whose newest record is not a delete.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from pyspark.sql import SparkSession

from benchmarks.bench import (
    CONTENDERS,
    FLOOR,
    FLOOR_PARSE,
    FLOOR_TABLES,
    NAIVE,
    RECLOCK_DAGSTER,
    RECLOCK_S3,
    RECLOCK_WINDOWS,
    Workload,
    history_growth,
    render,
    run_benchmark,
)

SMOKE = Workload(records=1_500, keys=150, partitions=2, windows=2, files=2)


def dump_lines(landing: Path) -> list[dict]:
    lines = []
    for path in sorted(p for p in landing.rglob("*") if p.is_file()):
        if path.name.startswith((".", "_")):
            continue
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as text:
            lines += [json.loads(line) for line in text if line.strip()]
    return lines


def live_keys(lines: list[dict]) -> int:
    """Keys whose newest record (highest offset in its partition) carries a value."""
    newest: dict[str, tuple[tuple[int, int], str | None]] = {}
    for line in lines:
        position = (line["partition"], line["offset"])
        if line["key"] not in newest or newest[line["key"]][0] < position:
            newest[line["key"]] = (position, line["payload"])
    return sum(payload is not None for _, payload in newest.values())


def table_rows(report: str) -> dict[str, list[str]]:
    """The contenders table of the report: contender name -> its cells."""
    rows = {}
    for line in report.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] in CONTENDERS:
            rows[cells[0]] = cells
    return rows


def test_every_contender_runs_and_reports(spark: SparkSession, tmp_path: Path) -> None:
    result = run_benchmark(spark, SMOKE, tmp_path, repeats=1)
    report = render(result)

    rows = table_rows(report)
    assert set(rows) == set(CONTENDERS) - {RECLOCK_S3}  # that one only with --s3
    for cells in rows.values():
        assert re.fullmatch(r"\d+\.\d\d", cells[1]), cells  # the median seconds
    assert "## Seconds per window against window index" in report
    # The report states the machine and the session's settings it ran with.
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    settings = next(line for line in report.splitlines() if line.startswith("- Spark settings:"))
    stated = settings.removeprefix("- Spark settings: ").split(", ")
    assert f"spark.sql.shuffle.partitions={partitions}" in stated
    assert any(line.startswith("- machine: ") and "pyspark" in line for line in report.splitlines())

    lines = dump_lines(result.dataset.landing)
    rows_out = {name: int(cells[6].replace(",", "")) for name, cells in rows.items()}
    assert rows_out[FLOOR] == rows_out[FLOOR_PARSE] == len(lines)
    expected = live_keys(lines)
    reclocked = (FLOOR_TABLES, RECLOCK_DAGSTER, RECLOCK_WINDOWS)
    assert rows_out[NAIVE] == expected
    assert [rows_out[name] for name in reclocked] == [expected] * len(reclocked)


def test_history_growth_compares_the_last_window_with_one_a_tenth_of_the_way_in() -> None:
    series = [9.0] + [2.0] * 8 + [3.0] + [2.5] * 9 + [5.0]  # 20 windows, the 2nd is early
    assert history_growth(series) == (2, 20, 2.5)
    assert history_growth([4.0, 2.0]) is None  # no history to speak of


def test_history_growth_skips_windows_that_cost_nothing() -> None:
    """A per-window peer that skips a window without dumps has no figure there (0 s)."""
    series = [0.0, 12.0, 0.0, 8.0, 6.0, 0.0, 6.0, 5.0, 0.0, 4.0]
    assert history_growth(series) == (4, 10, 0.5)
    assert history_growth([0.0, 3.0, 0.0, 4.0]) is None
