"""The CDCv2 export asset through real Dagster runs: one upsert source, two windows.

The expected changes are written by hand from the dumps below; the exported files are
read back by the plain-Python reference reader, and the ``changes`` Delta table is read
with delta-rs and consolidated in Python, so no export code judges its own output.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSeverity,
    AssetSelection,
    DagsterInstance,
    Definitions,
    ExecuteInProcessResult,
    define_asset_job,
)
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from assets.cdcv2_export import export_key
from assets.partitions import range_tags
from assets.source_assets import output_key
from cdc_core.app.export import Window, export_windows, work_folder
from cdc_core.cdcv2 import DataColumns, codec_json
from cdc_core.cdcv2.reference import read_all
from cdc_core.config import Config, ReaderSettings, load_config
from cdc_core.frontier import TimeFrontier
from cdc_core.shard import ShardUsageError
from cdc_core.shard.leases import LeaseBook, read_leases
from cdc_core.source import SourcePipeline
from pipelines.build import ALL_WINDOWS_JOB, build_definitions

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
WINDOW = 60_000
END_1, END_2 = T0 + WINDOW, T0 + 2 * WINDOW
KEY_1, KEY_2 = "2026-01-01T00:00:00", "2026-01-01T00:01:00"

# (partition, offset, ts, id, name or None for a delete)
RECORDS = [
    (0, 0, T0 + 1_000, 1, "ada"),
    (0, 1, T0 + 2_000, 2, "bob"),
    (0, 2, T0 + WINDOW + 1_000, 1, "cy"),
    (0, 3, T0 + WINDOW + 2_000, 2, None),
    (1, 0, T0 + 3_000, 3, "dee"),
    (1, 1, T0 + WINDOW + 3_000, 3, "dee"),  # same value again: nothing changes
    (1, 2, T0 + WINDOW + 4_000, 4, "eve"),
]
# Two overlapping dumps: partition 0 offset 2 is delivered twice.
DUMPS = {"a.json": [0, 1, 2, 4], "b.json": [2, 3, 5, 6]}

# Upsert changes, consolidated, as (id, name), time, diff: by hand from RECORDS.
EXPECTED = {
    ((1, "ada"), END_1): 1,
    ((2, "bob"), END_1): 1,
    ((3, "dee"), END_1): 1,
    ((1, "ada"), END_2): -1,
    ((1, "cy"), END_2): 1,
    ((2, "bob"), END_2): -1,
    ((4, "eve"), END_2): 1,
}


def write_dumps(landing: Path) -> None:
    for name, indexes in DUMPS.items():
        lines = []
        for partition, offset, ts, key, value in (RECORDS[i] for i in indexes):
            payload = None if value is None else json.dumps({"name": value})
            record = {
                "topic": "users",
                "partition": partition,
                "offset": offset,
                "ts": ts,
                "key": json.dumps({"id": key}),
                "payload": payload,
            }
            lines.append(json.dumps(record) + "\n")
        (landing / "users").mkdir(parents=True, exist_ok=True)
        (landing / "users" / name).write_text("".join(lines))


def write_config(workdir: Path, lake: Path, landing: Path) -> Config:
    config = {
        "lake": str(lake),
        "landing": str(landing),
        "window": "1m",
        "start": "2026-01-01T00:00:00Z",
        "end": "2026-01-01T00:02:00Z",
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
        "sources": [
            {
                "name": "users",
                "topic": "users",
                "format": "json",
                "key": {"id": "bigint"},
                "value": {"name": "string"},
                "envelope": "upsert",
                "reclock": "event-time",
            }
        ],
    }
    path = workdir / "reclock.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_config(path)


def run_job(config: Config, **selection: object) -> ExecuteInProcessResult:
    job = build_definitions(config).resolve_job_def(ALL_WINDOWS_JOB)
    return job.execute_in_process(
        instance=DagsterInstance.ephemeral(), raise_on_error=False, **selection
    )


def export_folder(config: Config, key: str) -> Path:
    return config.lake / "users" / "cdcv2" / key


def visible_files(folder: Path) -> list[str]:
    return sorted(name.name for name in folder.iterdir() if not name.name.startswith("."))


def read_exports(config: Config, keys: list[str], start: int) -> tuple[dict, TimeFrontier]:
    """The window folders read as one stream by the reference reader, from ``start``."""
    columns = DataColumns(config.source("users").output_schema)
    messages = [
        codec_json.decode(line, columns)
        for key in keys
        for name in visible_files(export_folder(config, key))
        for line in (export_folder(config, key) / name).read_text().splitlines()
    ]
    updates, frontier = read_all(messages, TimeFrontier.at(start))
    facts = {(data, time): diff for data, time, diff in updates}
    assert len(facts) == len(updates), "an update was reported twice"
    return facts, frontier


def changes_table(config: Config, lower: int, upper: int) -> dict:
    """The ``changes`` Delta table at times ``[lower, upper)``, consolidated in Python."""
    sums: dict = defaultdict(int)
    for row in DeltaTable(str(config.lake / "users" / "changes")).to_pyarrow_table().to_pylist():
        if lower <= row["time"] < upper:
            sums[((row["id"], row["name"]), row["time"])] += row["diff"]
    return {fact: diff for fact, diff in sums.items() if diff}


@pytest.fixture(scope="module")
def materialized(
    tmp_path_factory: pytest.TempPathFactory, spark: SparkSession
) -> tuple[Config, ExecuteInProcessResult]:
    workdir = tmp_path_factory.mktemp("export")
    write_dumps(workdir / "landing")
    config = write_config(workdir, workdir / "lake", workdir / "landing")
    result = run_job(config, tags=range_tags(KEY_1, KEY_2))
    assert result.success
    return config, result


def test_exported_windows_read_back_as_the_changes_shard(materialized) -> None:
    config, _ = materialized
    assert changes_table(config, T0 + 1, END_2 + 1) == EXPECTED
    facts, frontier = read_exports(config, [KEY_1, KEY_2], T0 + 1)
    assert facts == EXPECTED
    assert frontier == TimeFrontier.at(END_2 + 1)


def test_each_window_folder_holds_just_its_own_times(materialized) -> None:
    config, _ = materialized
    first, first_frontier = read_exports(config, [KEY_1], T0 + 1)
    assert first == {fact: d for fact, d in EXPECTED.items() if fact[1] == END_1}
    assert first_frontier == TimeFrontier.at(END_1 + 1)
    second, second_frontier = read_exports(config, [KEY_2], END_1 + 1)
    assert second == {fact: d for fact, d in EXPECTED.items() if fact[1] == END_2}
    assert second_frontier == TimeFrontier.at(END_2 + 1)


def test_each_window_materialization_carries_its_own_export(materialized) -> None:
    """One materialization per window of the range run, each with that window's figures
    (by hand: every expected fact lies at one window end, one progress statement each)."""
    config, result = materialized
    events = [
        e for e in result.get_asset_materialization_events() if e.asset_key == export_key("users")
    ]
    assert sorted(e.partition for e in events) == [KEY_1, KEY_2]
    ends = {KEY_1: END_1, KEY_2: END_2}
    for event in events:
        metadata = {k: v.value for k, v in event.materialization.metadata.items()}
        end = ends[event.partition]
        assert metadata["updates"] == sum(1 for fact in EXPECTED if fact[1] == end)
        assert metadata["progress_statements"] == 1
        assert metadata["windows"] == 2
        assert metadata["judged_time"] == end / 1000  # a timestamp, in seconds
        assert metadata["upper"] == (end + 1) / 1000
        assert metadata["window_folder"] == str(config.lake / "users" / "cdcv2" / event.partition)
        assert metadata["folder"] == str(config.lake / "users" / "cdcv2")


def test_rerunning_a_window_replaces_its_files_without_duplicates(materialized) -> None:
    config, _ = materialized
    before = visible_files(export_folder(config, KEY_1))
    assert run_job(config, partition_key=KEY_1, asset_selection=[export_key("users")]).success
    after = visible_files(export_folder(config, KEY_1))
    assert after != before, "the window was exported again"
    assert len(after) == len(before)
    assert sum(name.startswith("progress-") for name in after) == 1
    assert sorted(p.name for p in (config.lake / "users" / "cdcv2").iterdir()) == [KEY_1, KEY_2]
    facts, frontier = read_exports(config, [KEY_1, KEY_2], T0 + 1)
    assert facts == EXPECTED
    assert frontier == TimeFrontier.at(END_2 + 1)


def test_a_window_beyond_the_shard_upper_is_refused(materialized, spark: SparkSession) -> None:
    config, _ = materialized
    pipeline = SourcePipeline.from_config(spark, config, config.source("users"))
    root = config.lake / "users" / "cdcv2"
    with pytest.raises(ShardUsageError):
        export_windows(pipeline.changes, root, [Window("later", END_2, END_2 + WINDOW)])
    assert not any(p.name.startswith((".later", "later")) for p in root.iterdir())


def test_a_failed_completeness_check_on_changes_blocks_the_export(
    materialized, tmp_path: Path
) -> None:
    """A copy of the lake whose ``changes`` lost a row of window 2 behind the shard's back:
    its committed counts no longer match, so re-running window 2 must not export it."""
    config, _ = materialized
    lake = tmp_path / "lake"
    shutil.copytree(config.lake, lake)
    damaged = write_config(tmp_path, lake, config.landing)
    DeltaTable(str(lake / "users" / "changes")).delete(f"id = 4 AND time = {END_2}")
    before = visible_files(export_folder(damaged, KEY_2))

    result = run_job(damaged, partition_key=KEY_2)

    assert not result.success
    failed = [
        c for c in result.get_asset_check_evaluations() if c.check_name == "complete"
        and not c.passed
    ]
    assert [c.asset_key.path for c in failed] == [["users", "changes"]]
    exported = [
        e for e in result.get_asset_materialization_events() if e.asset_key == export_key("users")
    ]
    assert exported == []
    assert visible_files(export_folder(damaged, KEY_2)) == before


def test_the_export_holds_changes_while_it_runs_and_releases_it(materialized) -> None:
    config, result = materialized
    path = str(config.lake / "users" / "changes")
    reader = f"cdcv2-export-{result.run_id}"
    commits = [
        entry
        for entry in reversed(DeltaTable(path).history())
        if reader in entry.get("userMetadata", "")
    ]
    assert [c["userMetadata"] for c in commits] == [
        f"reclock leases: register reader {reader}",
        f"reclock leases: release {reader}",
    ]
    registered = commits[0]["reclock.leases"]
    registered = json.loads(registered) if isinstance(registered, str) else registered
    assert registered["reader"][reader]["since"] == T0  # the first window's start
    assert registered["reader"][reader]["lease_ms"] == config.readers.lease_ms
    assert reader not in read_leases(DeltaTable(path)).registrations


def run_readers_check(config: Config) -> AssetCheckEvaluation:
    check = AssetCheckKey(output_key("users", "changes"), "readers")
    job = define_asset_job("readers_only", selection=AssetSelection.checks(check))
    merged = Definitions.merge(build_definitions(config), Definitions(jobs=[job]))
    result = merged.resolve_job_def("readers_only").execute_in_process(
        tags=range_tags(KEY_2, KEY_2), instance=DagsterInstance.ephemeral()
    )
    [evaluation] = result.get_asset_check_evaluations()
    return evaluation


def test_the_readers_check_warns_when_a_reader_pins_history_past_the_age(
    materialized, tmp_path: Path
) -> None:
    config, _ = materialized
    lake = tmp_path / "lake"
    shutil.copytree(config.lake, lake)
    copied = write_config(tmp_path, lake, config.landing)
    strict = copied.model_copy(update={"readers": ReaderSettings(warn_after="1ms")})
    book = LeaseBook(str(lake / "users" / "changes"))
    book.register("audit", since=T0 + 1, lease_ms=3_600_000)

    fresh = run_readers_check(strict)  # the pin is the newest version: 0 ms old
    assert fresh.passed and fresh.severity == AssetCheckSeverity.WARN

    time.sleep(0.02)
    book.heartbeat("audit")  # the log moves on 20 ms; the pin stays where it was
    old = run_readers_check(strict)
    assert not old.passed and old.severity == AssetCheckSeverity.WARN
    assert "changes/audit" in old.description
    [pinned] = old.metadata["readers"].value
    assert (pinned["reader"], pinned["since"]) == ("audit", T0 + 1)

    assert run_readers_check(copied).passed  # the default age: a day
    book.release("audit")
    assert run_readers_check(strict).passed


def test_an_export_leaves_a_live_exports_staging_and_removes_one_whose_hold_ended(
    materialized, spark: SparkSession, tmp_path: Path
) -> None:
    config, _ = materialized
    lake = tmp_path / "lake"
    shutil.copytree(config.lake, lake)
    copied = write_config(tmp_path, lake, config.landing)
    changes = SourcePipeline.from_config(spark, copied, copied.source("users")).changes
    root = lake / "users" / "cdcv2"
    work = work_folder(root)
    live = work / f".{KEY_1}.cdcv2-export-running.staging"  # its run holds changes
    ended = work / f".{KEY_1}.cdcv2-export-crashed.staging"  # its hold is gone
    unowned = work / f".{KEY_1}.another-run.staging"  # young, owner unknown: kept
    for folder in (live, ended, unowned):
        folder.mkdir(parents=True)
    LeaseBook.of(changes).register("cdcv2-export-running", since=T0, lease_ms=3_600_000)

    export_windows(changes, root, [Window(KEY_1, T0, END_1)], "cdcv2-export-this")

    assert live.is_dir() and unowned.is_dir() and not ended.exists()
    assert not (work / f".{KEY_1}.cdcv2-export-this.staging").exists()
    assert sorted(p.name for p in work.iterdir()) == sorted([live.name, unowned.name])
    facts, _ = read_exports(copied, [KEY_1], T0 + 1)
    assert facts == {fact: d for fact, d in EXPECTED.items() if fact[1] == END_1}
