"""Every benchmark's report page, drawn from a small made-up result (no Spark, no timing):
the page names its date, machine and command, and shows each figure, written beside it
as a PNG that carries the same caption and plots the result's figures."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchmarks import (
    age,
    bench,
    cdcv2,
    cold_window,
    envelopes,
    open_ended,
    plan_building,
    profile,
    registry_age,
    serving,
    shard,
    sources,
    stacking,
)
from benchmarks.report_page import Provenance, Report, write_page

PROVENANCE = Provenance(
    datetime(2026, 12, 4, 13, 30, tzinfo=UTC),
    "a test machine, 2 cores",
    "python -m benchmarks.example --page docs/benchmarks/reports",
)
PNG = b"\x89PNG\r\n\x1a\n"


def sources_cases() -> sources.Cases:
    """Two source counts of the upsert variant: a first backfill, a window, a backfill."""

    def measures(n: int) -> list[sources.Figures]:
        return [
            sources.Figures("first 10 windows, own", 20.0 + n, 25.0, 10, 100 * n, 40 * n),
            sources.Figures("one window, own", 10.0 + n, 12.0, 1, 12 * n, 4 * n),
            sources.Figures("backfill 3 windows, own", 12.0 + 3 * n, 14.0, 3, 30 * n, 9 * n),
        ]

    return {"upsert": {1: measures(1), 4: measures(4)}}


def bench_report() -> Report:
    workload = bench.Workload(records=2_000, keys=200, partitions=2, windows=3)
    dataset = bench.Dataset(workload, Path("dumps"), None, (), (), 2_000, 1)  # type: ignore[arg-type]
    runs = {
        bench.FLOOR: [bench.Run(2.0, 100.0, 50.0, bench.Outcome(2_000))],
        bench.RECLOCK_WINDOWS: [
            bench.Run(9.0, 300.0, 90.0, bench.Outcome(150, window_seconds=(3.0, 3.0, 3.0)))
        ],
    }
    result = bench.BenchResult(dataset, 1, "local[2]", runs, {})
    return bench.page_report(result, "smoke", "# reclock against its peers\n\n| a |\n|---|")


def cold_window_report() -> Report:
    side = cold_window.Side("as written", {}, [13.0, 14.0], [10.0, 11.0])
    side.steps.update({cold_window.SESSION: [2.0, 2.2], "users: bind windows": [1.5, 1.7]})
    return cold_window.page_report([side], "100 records", "")


def profile_report() -> Report:
    phases = {"bind windows": profile.PhaseFigures(jobs=3, job_seconds=1.0, cpu_seconds=0.8)}
    wall = {"bind windows": 1.5, "plan envelope": 0.4}
    floor = profile.PhaseFigures(jobs=1, job_seconds=0.5, cpu_seconds=0.4)
    return profile.page_report("reclock-dagster", "RECLOCK on 2k", phases, wall, floor)


REPORTS: dict[str, Callable[[], Report]] = {
    "bench": bench_report,
    "age": lambda: age.page_report({
        1: {"(a) scheduled window": [age.Sample(10.0, 9.0)]},
        365: {"(a) scheduled window": [age.Sample(11.0, 9.5)]},
    }),  # fmt: skip
    "sources": lambda: sources.page_report(sources_cases()),
    "serving": lambda: serving.page_report(16, 4, {1: [8.0, 8.4], 4: [4.0, 4.1]}),
    "cold_window": cold_window_report,
    "open_ended": lambda: open_ended.page_report([
        open_ended.Age(1, 1_440, [(14.0, 12.0)], "Materialized 1 window"),
        open_ended.Age(365, 525_600, [(15.0, 12.5), (14.5, 12.1)], "Materialized 1 window"),
    ]),  # fmt: skip
    "plan_building": lambda: plan_building.page_report([
        plan_building.Plan("upsert", 900.0, 700.0, 2_500), plan_building.Plan("none", 90, 40, 300)
    ]),  # fmt: skip
    "profile": profile_report,
    "registry_age": lambda: registry_age.page_report([
        registry_age.Reads(1, 1_440, 0.2, 0.1, 0.01, 1),
        registry_age.Reads(30, 43_200, 1.5, 0.1, 0.01, 1),
    ]),  # fmt: skip
    "cdcv2": lambda: cdcv2.page_report(cdcv2.Reads(1_100, 1_000, 1.0, 2.0, 1.5, 1.0)),
    "shard": lambda: shard.page_report(
        1_000, 2.0, {"bare spark.read.parquet": 1.0, "shard listen": 1.2}, 10,
        {"shard listen (file list)": 0.1, "Delta data source": 0.3},
    ),  # fmt: skip
    "stacking": lambda: stacking.page_report({
        1: {name: [1.0, 1.2] for name in stacking.CONTENDERS},
        16: {name: [4.0 + i, 4.4 + i] for i, name in enumerate(stacking.CONTENDERS)},
    }),  # fmt: skip
    "envelopes": lambda: envelopes.page_report(
        1_000, {10_000: (1.0, 1_000), 100_000: (1.4, 1_000)}
    ),
}


@pytest.mark.parametrize("name", REPORTS)
def test_each_benchmark_writes_a_dated_page_with_its_captioned_figures(
    name: str, tmp_path: Path
) -> None:
    report = REPORTS[name]()
    page = write_page(tmp_path, report.name, report.title, report.body, report.figures, PROVENANCE)

    text = page.read_text(encoding="utf-8")
    assert page.name == f"2026-12-04-{report.name}.md"
    assert text.startswith(f"# {report.title}, 2026-12-04\n")
    assert "2026-12-04 13:30 UTC on a test machine, 2 cores" in text
    assert f"`{PROVENANCE.command}`" in text
    assert report.body.strip() in text
    assert report.figures
    for key, drawn in report.figures.items():
        png = tmp_path / f"2026-12-04-{report.name}-{key}.png"
        assert f"![{key}]({png.name})" in text
        assert png.read_bytes().startswith(PNG)
        assert [t.get_text() for t in drawn.texts] == [PROVENANCE.caption]
        for axes in drawn.axes:
            assert axes.lines or axes.patches, f"{key}: a plot with nothing drawn"


def test_the_source_count_page_plots_each_window_measure_per_window_against_n() -> None:
    report = sources.page_report(sources_cases())

    walls, jobs, commits = report.figures["sources"].axes
    # By hand from sources_cases: a window's figure as is, a backfill's over its 3 windows;
    # the first backfill (10 windows at once) is no scheduled window and is left out.
    expected = {
        "upsert: one window, own": ([1, 4], [11.0, 14.0], [12.0, 48.0], [4.0, 16.0]),
        "upsert: backfill 3 windows, own": ([1, 4], [5.0, 8.0], [10.0, 40.0], [3.0, 12.0]),
    }
    for label, (ns, wall, job, commit) in expected.items():
        for axes, values in ((walls, wall), (jobs, job), (commits, commit)):
            (line,) = [line for line in axes.lines if line.get_label() == label]
            assert list(line.get_xdata()) == ns
            assert list(line.get_ydata()) == pytest.approx(values)
    # (12 + 3*4 - (12 + 3*1)) / 3 sources = 3 s per source for the backfill.
    assert "| upsert | backfill 3 windows, own | 1 | 4 | 3.000 |" in report.body
    assert "| one window, own | 11.0 / 12.0 s · 12.0 jobs/w · 4.0 commits/w · load 0.0 |" in (
        report.body
    )


def test_every_benchmark_with_a_page_option_has_its_page_drawn_here() -> None:
    folder = Path(__file__).resolve().parents[2] / "benchmarks"
    with_pages = {
        path.stem for path in folder.glob("*.py") if "add_page_option(parser)" in path.read_text()
    }
    assert with_pages == set(REPORTS)


def test_a_source_count_figures_file_is_drawn_again_as_measured(tmp_path: Path) -> None:
    saved = tmp_path / "sources.json"
    sources.save(saved, ["--sources", "1", "4", "--page", "docs"], sources_cases())

    provenance, cases = sources.load(saved)

    assert cases == sources_cases()
    assert provenance.command == "python -m benchmarks.sources --sources 1 4 --page docs"
    assert provenance.measured.tzinfo is not None


def test_the_stacking_page_gives_each_contenders_seconds_per_source_added() -> None:
    report = REPORTS["stacking"]()

    # By hand: medians 1.1 s at 1 source; 4.2, 5.2 and 6.2 s at 16, in contender order.
    assert "| 16 | one generic job | 6.20 | 0.388 |" in report.body
    assert "- job per source: 207 ms per source added" in report.body  # (4.2 - 1.1) / 15
    assert "- one generic job: 340 ms per source added" in report.body  # (6.2 - 1.1) / 15
    (axes,) = report.figures["seconds"].axes
    (line,) = [line for line in axes.lines if line.get_label() == "union of typed plans"]
    assert list(line.get_xdata()) == [1, 16]
    assert list(line.get_ydata()) == pytest.approx([1.1, 5.2])
