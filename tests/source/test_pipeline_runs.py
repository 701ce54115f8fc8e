"""A backfill reclocks a range of windows in one pass; scheduled runs take a window at a
time; a crash may leave bindings without outputs. Every way of cutting the same windows
into runs must write the same rows, at the same times, to every shard of every source."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from cdc_core.config import Config, load_config
from cdc_core.phases import PhaseEvent, observing
from cdc_core.reclock import Windows, mint_bindings
from cdc_core.shard.leases import WRITER, read_leases
from cdc_core.source import SourcePipeline
from cdc_core.source.state import published_updates
from pipelines.sample import write_sample
from tests.lake_rows import commit_info

WINDOWS = 4  # of the sample's eight: enough for history, short enough for a test
SHARDS = ("remap", "reclocked", "changes", "errors")


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return load_config(write_sample(tmp_path_factory.mktemp("sample")))


def windows(config: Config, first: int, last: int) -> Windows:
    """Windows ``first .. last`` (1-based) of the sample as one run."""
    width = config.window_ms
    return Windows(config.start_ms + (first - 1) * width, config.start_ms + last * width, width)


Shards = dict[str, list[tuple]]  # shard -> its consolidated rows (data, time, diff)
Reports = list[tuple[int, int, int, int]]  # per window: end, records in, changes, errors


def shard_rows(root: Path) -> Shards:
    """Every shard's rows (data, time, diff), consolidated and sorted: what it says."""
    contents = {}
    for name in SHARDS:
        totals: dict[tuple, int] = {}
        for row in DeltaTable(str(root / name)).to_pyarrow_table().to_pylist():
            diff = row.pop("diff")
            key = tuple(sorted(row.items(), key=lambda item: item[0]))
            totals[key] = totals.get(key, 0) + diff
        contents[name] = sorted(
            ((key, diff) for key, diff in totals.items() if diff != 0), key=repr
        )
    return contents


def run(
    spark: SparkSession, config: Config, lake: Path, name: str, runs: list[Windows], *,
    bound_first: bool = False,
) -> tuple[Shards, Reports]:
    """Run ``runs`` in order for source ``name`` in a fresh lake; its shards and the
    per-window reports (end, records in, changes, errors)."""
    config = config.model_copy(update={"lake": lake})
    source = next(s for s in config.sources if s.name == name)
    pipeline = SourcePipeline.from_config(spark, config, source)
    pipeline.register_dumps(arrival_ms=config.start_ms + 100 * config.window_ms)
    if bound_first:  # a crash right after binding: bindings durable, no outputs yet
        whole = Windows(runs[0].start, runs[-1].end, config.window_ms)
        mint_bindings(
            spark, source, pipeline.registry, pipeline.remap, whole, None,
            pipeline.imposed_bindings,  # a member of a transaction group copies the group's
        )
    reports = [
        (r.end, r.records_in, r.updates_out, r.errors_out)
        for windows in runs
        for r in pipeline.run_windows(windows)
    ]
    return shard_rows(config.lake / name), reports


@pytest.fixture(scope="module")
def backfill_of(
    spark: SparkSession, sample: Config, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], tuple[Shards, Reports]]:
    """The one backfill of a source's WINDOWS windows (its shards and reports) that every
    other cut of them is compared with: run once per source for the module, read only."""
    done: dict[str, tuple[Shards, Reports]] = {}

    def of(name: str) -> tuple[Shards, Reports]:
        if name not in done:
            lake = tmp_path_factory.mktemp(f"backfill-{name}")
            done[name] = run(spark, sample, lake, name, [windows(sample, 1, WINDOWS)])
        return done[name]

    return of


@pytest.mark.parametrize("name", ["users", "orders", "clicks"])
def test_every_cut_of_the_windows_into_runs_writes_the_same_shards(
    spark: SparkSession, sample: Config, tmp_path: Path, name: str,
    backfill_of: Callable[[str], tuple[Shards, Reports]],
) -> None:
    backfill, backfill_reports = backfill_of(name)
    scheduled, scheduled_reports = run(
        spark,
        sample,
        tmp_path / "scheduled",
        name,
        [windows(sample, 1, 1), windows(sample, 2, WINDOWS)],
        bound_first=True,
    )
    assert scheduled == backfill
    # The reports count what each window wrote, the same whichever run wrote it.
    assert scheduled_reports == backfill_reports
    assert sum(records for _, records, _, _ in backfill_reports) == len(
        {(key["partition"], key["offset"]) for key in _data(backfill["reclocked"])}
    )
    assert [end for end, *_ in backfill_reports] == windows(sample, 1, WINDOWS).ends
    # Something happened in every shard, so the comparison is not between empty tables.
    assert all(backfill[shard] for shard in ("remap", "reclocked", "changes"))


@pytest.mark.parametrize("tampered", [False, True])
def test_runs_that_publish_state_in_between_write_what_one_backfill_writes(
    spark: SparkSession, sample: Config, tmp_path: Path, tampered: bool,
    backfill_of: Callable[[str], tuple[Shards, Reports]],
) -> None:
    """A run reads the prior rows of its keys from the ``state`` the previous run published
    (not from the history of ``changes``); a ``state`` someone else wrote to since is not
    trusted, and the history is read instead: the shards are the same either way."""
    backfill, _ = backfill_of("users")
    config = sample.model_copy(update={"lake": tmp_path / "scheduled"})
    pipeline = SourcePipeline.from_config(spark, config, config.source("users"))
    pipeline.register_dumps(arrival_ms=config.start_ms + 100 * config.window_ms)
    state = config.lake / "users" / "state"
    for window in range(1, WINDOWS + 1):
        pipeline.run_windows(windows(config, window, window))
        pipeline.finish()
        end, schema = windows(config, window, window).end, pipeline.source.output_schema
        assert published_updates(spark, str(state), schema, end) is not None  # read next
        if tampered:  # every row of state gone, behind reclock's back but through Delta
            rows = DeltaTable(str(state)).to_pyarrow_table()
            write_deltalake(str(state), rows.slice(0, 0), mode="overwrite")
            assert published_updates(spark, str(state), schema, end) is None
    assert shard_rows(config.lake / "users") == backfill
    assert backfill["changes"]


def _data(rows: list[tuple]) -> list[dict]:
    return [dict(key) for key, _ in rows]


def test_a_run_writes_as_a_registered_writer_and_releases_its_leases(
    spark: SparkSession, sample: Config, tmp_path: Path
) -> None:
    """While a run stages and commits, it is a live registered writer of every shard it
    writes (its staging safe from any gc): from before it binds until its last commit to
    the shard, which releases it. So once it ends nothing of it stays registered, and no
    commit of its own follows to say so."""
    config = sample.model_copy(update={"lake": tmp_path / "lake"})
    source = config.sources[0]
    pipeline = SourcePipeline.from_config(spark, config, source)
    pipeline.register_dumps(arrival_ms=config.start_ms + 100 * config.window_ms)
    shards = [pipeline.remap, *pipeline.outputs]
    before = {shard.path: DeltaTable(shard.path).version() for shard in shards}
    seen: dict[str, dict[str, set[str]]] = {}

    def look(event: PhaseEvent) -> None:
        if event.name in ("bind windows", "append changes") and not event.ended:
            seen[event.name] = {
                shard.path: {r.holder for r in
                             read_leases(DeltaTable(shard.path)).live(WRITER)}
                for shard in shards
            }  # fmt: skip

    with observing(look):
        pipeline.run_windows(windows(config, 1, 2))
    writers = set().union(*seen["bind windows"].values())
    assert len(writers) == 1 and all(seen["bind windows"][s.path] == writers for s in shards)
    # By the envelope, the remap's and reclocked's last commits of the run released them.
    released = {pipeline.remap.path, pipeline.reclocked.path}
    assert {path for path, held in seen["append changes"].items() if not held} == released
    for shard in shards:
        table = DeltaTable(shard.path)
        assert read_leases(table).registrations == {}
        newest = commit_info(shard.path, table.version())
        assert "releasing writer" in newest["userMetadata"]  # the data commit released it
        # Registered, then its data, then nothing: two commits of the run for one window.
        assert table.version() == before[shard.path] + 2


def test_a_window_run_again_reports_the_figures_its_first_run_wrote(
    spark: SparkSession, sample: Config, tmp_path: Path
) -> None:
    """Windows the outputs already hold write nothing, and report what their run wrote
    (records in, changes, errors, binding), not zeros: a re-materialized partition keeps
    its own figures."""
    config = sample.model_copy(update={"lake": tmp_path / "lake"})
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
    pipeline.register_dumps(arrival_ms=config.start_ms + 100 * config.window_ms)
    first = pipeline.run_windows(windows(config, 1, 3))
    assert any(report.records_in and report.updates_out for report in first)
    again = pipeline.run_windows(windows(config, 1, 3))
    assert [dataclasses.replace(r, minted=False) for r in first] == again
