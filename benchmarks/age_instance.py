"""The Dagster instance a per-minute schedule leaves behind: one finished run per window,
each with the materialization of every asset of the source for its window.

Written into the instance's storages (rows as ``add_run`` and ``store_event`` write them,
in bulk; see ``_write``), not by executing runs: a real run records some forty more
events (steps, logs, check evaluations) that no page timed here reads. The event log is
one SQLite database (Dagster's ``ConsolidatedSqliteEventLogStorage``, the layout of an
instance on one database server) rather than one file per run, written on ``/dev/shm``
and moved into place; each run is created at its window's end.

    python -m benchmarks.age_instance --home DIR --days 30
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from dagster import AssetKey, AssetMaterialization, DagsterEventType, DagsterInstance
from dagster._core.events import DagsterEvent, StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus
from dagster._serdes import serialize_value

from cdc_core.calendar import PARTITION_FORMAT, to_datetime
from resources.run_tags import PARTITION_NAME_TAG

JOB = "all_sources_windows"
MINUTE_MS = 60_000
SETTINGS = """telemetry:
  enabled: false
nux:
  enabled: false
event_log_storage:
  module: dagster.core.storage.event_log
  class: ConsolidatedSqliteEventLogStorage
  config:
    base_dir: {base_dir}
"""


def instance_settings(home: Path) -> None:
    """Write ``home/dagster.yaml``: one SQLite event log under ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(SETTINGS.format(base_dir=home / "history" / "events"))


def write_runs(
    home: Path,
    assets: list[AssetKey],
    first_end_ms: int,
    last_end_ms: int,
    *,
    in_place: bool = False,
) -> tuple[int, float]:
    """Write into the instance at ``home`` one successful run per one-minute window whose
    end lies in ``[first_end_ms, last_end_ms]``, each with a materialization of every asset
    in ``assets`` for its window: a new instance written on ``/dev/shm`` and moved in, or
    (``in_place``) added to the instance already there. Returns (runs, seconds taken)."""
    began = time.perf_counter()
    if in_place:
        with DagsterInstance.from_config(str(home)) as instance:
            runs_db = home / "history" / "runs.db"
            runs = _write(instance, runs_db, assets, first_end_ms, last_end_ms)
        return runs, time.perf_counter() - began
    with tempfile.TemporaryDirectory(prefix="reclock-age-instance-", dir="/dev/shm") as scratch:
        staging = Path(scratch) / "home"
        instance_settings(staging)
        with DagsterInstance.from_config(str(staging)) as instance:
            runs = _write(
                instance, staging / "history" / "runs.db", assets, first_end_ms, last_end_ms
            )
        shutil.rmtree(home / "history", ignore_errors=True)
        home.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging / "history"), str(home / "history"))
    instance_settings(home)
    return runs, time.perf_counter() - began


def _write(
    instance: DagsterInstance,
    runs_db: Path,
    assets: list[AssetKey],
    first_end_ms: int,
    last_end_ms: int,
) -> int:
    """The runs and materializations of ``write_runs``; returns how many runs.

    Runs are inserted into the run storage's tables in bulk, each row as ``add_run``
    would write it (the serialized run, its status, partition and tag), created at its
    window's end and finished 5 s later. The materializations of every window but the
    last are inserted into the event log's table in bulk, each row as ``store_event``
    would write it (the serialized entry, its type, time, asset key and partition); the
    last window's go through ``store_event_batch``, which also records each asset's
    latest materialization. Through the storages one at a time, a run with its six
    events took some 25 ms here (a month of windows: 18 minutes)."""
    rows: list[tuple[str, str, str, str, None, str, str]] = []
    run_rows: list[tuple[Any, ...]] = []
    last: list[EventLogEntry] = []
    for end_ms in range(first_end_ms, last_end_ms + 1, MINUTE_MS):
        key = to_datetime(end_ms - MINUTE_MS).strftime(PARTITION_FORMAT)
        run_id = uuid.uuid4().hex
        run = DagsterRun(job_name=JOB, run_id=run_id, status=DagsterRunStatus.SUCCESS,
                         tags={PARTITION_NAME_TAG: key})  # fmt: skip
        seconds = end_ms / 1000 + 5
        stamp = to_datetime(int(seconds * 1000)).strftime("%Y-%m-%d %H:%M:%S.%f")
        begun = to_datetime(end_ms).strftime("%Y-%m-%d %H:%M:%S.%f")
        run_rows.append((run_id, JOB, run.status.value, serialize_value(run), key, begun, stamp,
                         end_ms / 1000, seconds))  # fmt: skip
        last = []
        for asset in assets:
            materialization = AssetMaterialization(
                asset_key=asset, partition=key, metadata={"records_in": 12}
            )
            event = DagsterEvent(
                event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
                job_name=JOB,
                event_specific_data=StepMaterializationData(materialization),
            )
            entry = EventLogEntry(
                error_info=None, level=20, user_message="", run_id=run_id,
                timestamp=seconds, dagster_event=event,
            )  # fmt: skip
            last.append(entry)
            rows.append((run_id, serialize_value(entry), event.event_type_value, stamp, None,
                         asset.to_string(), key))  # fmt: skip
    del rows[len(rows) - len(last) :]
    with sqlite3.connect(runs_db) as connection:
        connection.executemany(
            "INSERT INTO runs (run_id, pipeline_name, status, run_body, partition, "
            "create_timestamp, update_timestamp, start_time, end_time) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            run_rows,
        )
        connection.executemany(
            "INSERT INTO run_tags (run_id, key, value) VALUES (?, ?, ?)",
            [(row[0], PARTITION_NAME_TAG, row[4]) for row in run_rows],
        )
    database = Path(instance.event_log_storage._base_dir) / "event_log.db"  # noqa: SLF001
    with sqlite3.connect(database) as connection:
        connection.executemany(
            "INSERT INTO event_logs (run_id, event, dagster_event_type, timestamp, step_key, "
            "asset_key, partition) VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    if last:
        instance.event_log_storage.store_event_batch(last)
    return len(run_rows)


def main() -> None:
    """Write an instance of ``--days`` of per-minute runs ending now."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--days", type=float, required=True)
    parser.add_argument("--source", default="users")
    parser.add_argument("--assets", nargs="+",
                        default=["remap", "reclocked", "changes", "state", "errors",
                                 "changes_cdcv2"])  # fmt: skip
    args = parser.parse_args()
    now = int(time.time() * 1000) // MINUTE_MS * MINUTE_MS
    keys = [AssetKey([args.source, name]) for name in args.assets]
    runs, seconds = write_runs(args.home, keys, now - int(args.days * 1_440) * MINUTE_MS, now)
    print(f"{runs} runs, {runs * len(keys)} materializations in {seconds:.0f} s", flush=True)


if __name__ == "__main__":
    main()
