"""Maintenance keeps a long-running source bounded without changing what it publishes.

A source run window by window, as a per-minute schedule runs it (a dump per window, a
commit per window and table), crosses a UTC midnight; its own retention (shorter than the
config's, which would keep every window) puts its horizon at that midnight. ``maintain``
must move every output's since there (but never past a live reader's hold), merge the
small files, collect what no version needs, checkpoint and trim every log, leave
``state`` and every exact snapshot from the horizon on unchanged, and leave a source
whose next runs and checks go on as before.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance
from deltalake import DeltaTable

from cdc_core.config import Config, load_config
from cdc_core.frontier import TimeFrontier
from cdc_core.reclock import Windows
from cdc_core.shard import ShardUsageError
from cdc_core.shard.delta_io import live_files
from cdc_core.shard.leases import LeaseBook
from cdc_core.source import SourcePipeline
from cdc_core.source.upkeep import maintain_source
from pipelines.build import build_definitions
from pipelines.cli import main
from pipelines.maintenance import MAINTENANCE_JOB
from pipelines.run import materialize
from tests.judged_alone import completeness
from tests.upsert_config import write_upsert_config

START = 1_767_311_520_000  # 2026-01-01T23:52:00Z
MIDNIGHT = 1_767_312_000_000  # 2026-01-02T00:00:00Z: the retention horizon below
MINUTE = 60_000
WINDOWS = 14  # through 2026-01-02T00:06
SHARDS = ("remap", "reclocked", "changes", "errors")
NOW = MIDNIGHT + 24 * 60 * MINUTE + 10 * MINUTE  # one day (its retention) and 10 min later


def dump(landing: Path, window: int) -> None:
    """Window ``window``'s dump: three upserts of keys that come back every window."""
    lines = []
    for i in range(3):
        offset = 3 * window + i
        record = {"topic": "users", "partition": 0, "offset": offset, "tstype": "create",
                  "ts": START + window * MINUTE + i, "broker": 1, "headers": [],
                  "key": json.dumps({"id": (window + i) % 5}),
                  "payload": json.dumps({"name": f"v{offset}"})}  # fmt: skip
        lines.append(json.dumps(record))
    (landing / f"{window:03d}.json").write_text("\n".join(lines) + "\n")


def write_config(workdir: Path, windows: int) -> Config:
    end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((START + windows * MINUTE) / 1000))
    path = write_upsert_config(
        workdir, start="2026-01-01T23:52:00Z", end=end, retention="2d",
        source={"retention": "1d"}, readers={"lease": "1s"},
    )
    return load_config(path)


def log_commits(table: str) -> int:
    return sum(name.endswith(".json") for name in os.listdir(Path(table) / "_delta_log"))


def rows(pipeline: SourcePipeline, as_of: int) -> set[tuple[int, str]]:
    return {(r["id"], r["name"]) for r in pipeline.reader.snapshot_at(as_of).collect()}


@pytest.fixture(scope="module")
def aged(tmp_path_factory: pytest.TempPathFactory, spark) -> Config:
    """WINDOWS windows, each its own run after its dump landed."""
    workdir = tmp_path_factory.mktemp("maintenance")
    config = write_config(workdir, WINDOWS)
    landing = config.landing / "users"
    pipeline = SourcePipeline.from_config(spark, config, config.source("users"))
    for window in range(WINDOWS):
        dump(landing, window)
        end = START + (window + 1) * MINUTE
        pipeline.register_dumps(end - 1)
        pipeline.run_windows(Windows.one(end - MINUTE, end))
        pipeline.finish()
    return config


def test_maintain_bounds_every_table_and_keeps_what_it_publishes(aged: Config, spark) -> None:
    pipeline = SourcePipeline.from_config(spark, aged, aged.source("users"))
    changes = str(aged.lake / "users" / "changes")
    last = START + WINDOWS * MINUTE
    state = DeltaTable(str(aged.lake / "users" / "state")).to_pyarrow_table().to_pylist()
    exact = {t: rows(pipeline, t) for t in (MIDNIGHT, MIDNIGHT + 3 * MINUTE, last)}
    early = rows(pipeline, MIDNIGHT - 5 * MINUTE)
    files, commits = len(live_files(DeltaTable(changes))), log_commits(changes)
    assert files >= WINDOWS and commits >= WINDOWS  # a file and a commit per window at least
    # A reader holds changes from 5 minutes before the horizon: its since stops there.
    pinned = LeaseBook.of(pipeline.changes).register("analyst", MIDNIGHT - 5 * MINUTE, 3_600_000)
    time.sleep(1.5)  # the log files written so far are older than the 1 s lease

    held = maintain_source(pipeline, NOW)

    assert held.tables["changes"].since == TimeFrontier.at(MIDNIGHT - 5 * MINUTE)
    # The version the reader pins stays readable, its files and all.
    assert DeltaTable(changes, version=pinned.version).to_pyarrow_table().num_rows > 0
    for name in ("reclocked", "errors"):
        assert held.tables[name].since == TimeFrontier.at(MIDNIGHT), name
    assert len(live_files(DeltaTable(changes))) <= 2, "small files merged"
    assert held.tables["dumps/files"].files_after == 1
    assert rows(pipeline, MIDNIGHT - 5 * MINUTE) == early  # the reader's hold is honoured
    with pytest.raises(ShardUsageError, match="before since"):
        pipeline.reclocked.snapshot(MIDNIGHT - MINUTE)

    LeaseBook.of(pipeline.changes).release("analyst")
    time.sleep(1.5)
    report = maintain_source(pipeline, NOW)  # repeatable, and now free to go on

    assert report.tables["changes"].since == TimeFrontier.at(MIDNIGHT)
    assert log_commits(changes) < commits / 4, "the log trimmed to its checkpoint"
    assert held.tables["changes"].collected + report.tables["changes"].collected > 0
    assert DeltaTable(str(aged.lake / "users" / "state")).to_pyarrow_table().to_pylist() == state
    assert {t: rows(pipeline, t) for t in exact} == exact

    # The config's retention is only the default of sources naming none: the partitions
    # begin at this source's horizon. A window before a source's since (a partition while
    # another source's longer retention reaches it) runs as a no-op, and its completeness
    # check has nothing left to recount.
    assert aged.calendar.first_window_start(NOW) == MIDNIGHT
    versions = {t: DeltaTable(str(aged.lake / "users" / t)).version() for t in SHARDS}
    before = Windows.one(MIDNIGHT - 2 * MINUTE, MIDNIGHT - MINUTE)
    assert not any(report.minted for report in pipeline.run_windows(before))
    assert {t: DeltaTable(str(aged.lake / "users" / t)).version() for t in SHARDS} == versions
    assert completeness(pipeline.changes, before.start + 1, before.end + 1).passed


def test_runs_and_checks_go_on_after_maintenance(aged: Config, spark, capsys) -> None:
    """The next windows run (their checks pass) on the maintained tables, and the
    command line maintains again."""
    workdir = aged.lake.parent
    dump(workdir / "landing" / "users", WINDOWS)
    dump(workdir / "landing" / "users", WINDOWS + 1)
    longer = write_config(workdir, WINDOWS + 2)
    assert materialize(longer, exports=False)
    # Export folders of the first window and of the last (the horizon of this finite
    # config, now long past its end, is its last window's start).
    export = workdir / "lake" / "users" / "cdcv2"
    for key in ("2026-01-01T23:52:00", "2026-01-02T00:07:00"):
        (export / key).mkdir(parents=True)
        (export / key / "progress-0.json").write_text("{}\n")
    assert main(["maintain", "--config", str(workdir / "reclock.yaml")]) == 0
    printed = capsys.readouterr().out
    assert "users: retired" in printed
    assert "cdcv2          1 window folder(s) before 2026-01-02T00:07:00Z deleted" in printed
    assert sorted(p.name for p in export.iterdir()) == ["2026-01-02T00:07:00"]
    pipeline = SourcePipeline.from_config(spark, longer, longer.source("users"))
    last = WINDOWS + 1  # the last window's first record: key (window + 0) % 5
    assert (last % 5, f"v{3 * last}") in rows(pipeline, START + (WINDOWS + 2) * MINUTE)


def test_the_daily_job_maintains_as_the_command_does_and_logs_it(aged: Config) -> None:
    """The ``maintenance`` job (what ``maintenance_daily`` launches), run by Dagster:
    every source maintained, its export expired, and the run's log says so."""
    workdir = aged.lake.parent
    expired = workdir / "lake" / "users" / "cdcv2" / "2026-01-01T23:53:00"
    expired.mkdir(parents=True)
    config = load_config(workdir / "reclock.yaml")
    job = build_definitions(config).resolve_job_def(MAINTENANCE_JOB)
    with DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(instance=instance)
        assert result.success
        logged = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert any(message.startswith("users: retired") for message in logged), logged
    assert any("1 window folder(s) before" in message for message in logged), logged
    assert not expired.exists()
