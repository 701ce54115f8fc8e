"""The launchable span: an asset lists about six hours of windows (the default), however long
ago its config's ``start`` lies and however long its tables are kept, and no run, sensor
tick or schedule tick asks Dagster for every one of them.

An open-ended source whose start lay 11 months back took minutes per window,
because an unpartitioned check of a partitioned asset made Dagster list all 474,094
partition keys of the asset, several times per run. Dagster formats every key it lists
with one function; the tests count its calls with the interpreter's profiling hook
(nothing of Dagster's is wrapped or replaced), as "partition keys touched".
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import yaml
from dagster import (
    AssetKey,
    DagsterInstance,
    PartitionKeyRange,
    build_schedule_context,
    build_sensor_context,
)
from dagster._time import dst_safe_strftime  # what formats each key Dagster lists
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from assets.partitions import (
    range_tags,
    window_key,
    window_partitions,
)
from benchmarks.screenshot import graphql, running_webserver
from cdc_core.calendar import MS_PER_DAY
from cdc_core.config import MAX_PARTITIONS, Config, load_config
from pipelines.build import ALL_WINDOWS_JOB, build_definitions
from pipelines.maintenance import MAINTENANCE_JOB
from pipelines.run import materialize
from pipelines.run_output import quiet_instance
from resources.lake import LakeResource
from resources.run_tags import ASSET_PARTITION_RANGE_START_TAG

MINUTE = 60_000
HOUR = 60 * MINUTE
SOURCE = "users"
# Far below the 360-odd windows the default span lists: a run, a sensor tick or a schedule
# tick formats the keys of its own windows (and a few more), never all of them.
KEYS_TOUCHED_AT_MOST = 100


@dataclass
class KeysTouched:
    """How many partition keys Dagster formatted while counting."""

    count: int = 0


@contextmanager
def partition_keys_touched() -> Iterator[KeysTouched]:
    """Count the calls of Dagster's key formatter on this thread (where the in-process
    executor runs every step) while the block runs."""
    touched = KeysTouched()
    code = dst_safe_strftime.__code__

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code is code:
            touched.count += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield touched
    finally:
        sys.setprofile(previous)


def away_from_the_hour() -> int:
    """Now, in epoch ms, at least two minutes before the next hour: the partitions' start
    moves on the hour, and a test must not see it move (the longest takes well under a
    minute). The windows these tests use closed an hour or more before their ``now``, so
    the moment just after the hour does as well as any: waiting costs two minutes at most."""
    now = int(time.time() * 1000)
    into_hour = now % HOUR
    if into_hour > HOUR - 2 * MINUTE:
        time.sleep((HOUR - into_hour + 1_000) / 1000)
        now = int(time.time() * 1000)
    return now


def write_config(workdir: Path, start_ms: int, **extra: Any) -> Config:
    """An open-ended upsert source of one-minute windows starting at ``start_ms``."""
    data = {
        "lake": "lake", "landing": "landing", "window": "1m",
        "start": datetime.fromtimestamp(start_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
        "sources": [{"name": SOURCE, "topic": SOURCE, "key": {"id": "bigint"},
                     "value": {"name": "string"}, "envelope": "upsert",
                     "reclock": "event-time"}],
        **extra,
    }  # fmt: skip
    path = workdir / "reclock.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def land(config: Config, records: list[tuple[int, int, int]]) -> None:
    """kcat lines of ``(offset, key id, ts)`` in Kafka partition 0."""
    lines = [
        json.dumps({"topic": SOURCE, "partition": 0, "offset": offset, "tstype": "create",
                    "ts": ts, "broker": 1, "headers": [], "key": json.dumps({"id": key}),
                    "payload": json.dumps({"name": f"v{offset}"})})
        for offset, key, ts in records
    ]  # fmt: skip
    folder = config.landing / SOURCE
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dump.json").write_text("\n".join(lines) + "\n")


def reclocked_times(config: Config) -> dict[int, int]:
    """Records per binding time in ``reclocked``."""
    rows = DeltaTable(str(config.lake / SOURCE / "reclocked")).to_pyarrow_table().to_pylist()
    counts: dict[int, int] = {}
    for row in rows:
        counts[row["time"]] = counts.get(row["time"], 0) + row["diff"]
    return counts


def test_a_year_old_open_ended_source_runs_a_window_without_listing_every_partition(
    spark: SparkSession, tmp_path: Path
) -> None:
    now = away_from_the_hour()
    start = now // MS_PER_DAY * MS_PER_DAY - 365 * MS_PER_DAY
    config = write_config(tmp_path, start)  # no end, no span: the default six hours
    partitions = window_partitions(config, now)
    assert 360 <= partitions.get_num_partitions() <= 360 + 60 + 1

    # A dozen records, a year after start: in the first window Dagster still lists (the
    # hour six hours ago) and the two after it.
    first = config.calendar.first_window_start(now)
    assert first == (now - 6 * HOUR) // HOUR * HOUR
    land(config, [(i, i % 5, first + (i // 4) * MINUTE + 1_000 * (i + 1)) for i in range(12)])
    definitions = build_definitions(config, now)
    instance = DagsterInstance.ephemeral()
    keys = [window_key(config, first + i * MINUTE) for i in (1, 2, 3)]

    with partition_keys_touched() as one_window:
        assert materialize(config, first + MINUTE, exports=False)  # one window, as the CLI
    with partition_keys_touched() as a_range:  # a range of windows, exports included
        job = definitions.resolve_job_def(ALL_WINDOWS_JOB)
        ranged = job.execute_in_process(tags=range_tags(keys[1], keys[2]), instance=instance)
    assert ranged.success
    assert all(e.passed for e in ranged.get_asset_check_evaluations())
    assert reclocked_times(config) == {first + MINUTE: 4, first + 2 * MINUTE: 4,
                                       first + 3 * MINUTE: 4}  # fmt: skip

    lake = {"lake": LakeResource(root=str(config.lake), landing=str(config.landing))}
    with partition_keys_touched() as ticks:
        sensor = definitions.resolve_sensor_def("new_dumps")
        asked = sensor.evaluate_tick(build_sensor_context(instance=instance, resources=lake))
        schedule = definitions.resolve_schedule_def("latest_closed_window")
        scheduled = schedule.evaluate_tick(build_schedule_context(
            scheduled_execution_time=datetime.fromtimestamp(now // MINUTE * 60, UTC),
            repository_def=definitions.get_repository_def(),
        ))  # fmt: skip
    # The sensor asks for the windows the outputs do not hold yet, as one range named by
    # its ends; the schedule for the window that just closed, by its key.
    (catch_up,) = asked.run_requests
    assert catch_up.tags[ASSET_PARTITION_RANGE_START_TAG] == window_key(config, first + 4 * MINUTE)
    (latest,) = scheduled.run_requests
    assert latest.partition_key == window_key(config, now // MINUTE * MINUTE)

    # The counter counts: listing three keys formats three.
    with partition_keys_touched() as probe:
        partitions.get_partition_keys_in_range(PartitionKeyRange(keys[0], keys[2]))
    assert probe.count >= 3
    touched = {"one window": one_window.count, "a range": a_range.count, "ticks": ticks.count}
    assert max(touched.values()) <= KEYS_TOUCHED_AT_MOST, touched


STATUS_QUERY = """
{
  assetNodes(assetKeys: [{path: ["users", "changes"]}]) {
    partitionStats { numMaterialized numPartitions }
    assetPartitionStatuses {
      ... on TimePartitionStatuses { ranges { startKey endKey status } }
    }
  }
}
"""


def test_windows_still_listed_show_materialized_after_the_partitions_start_moved(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows materialized while the partitions began an hour earlier: the UI, whose
    start has moved past one of them since, shows the others materialized, and lists no
    window before its start."""
    now = away_from_the_hour()
    midnight = now // MS_PER_DAY * MS_PER_DAY
    config = write_config(tmp_path, midnight - 3 * MS_PER_DAY, launchable="1h")
    horizon = (now - HOUR) // HOUR * HOUR  # where the UI starts: the hour an hour ago
    assert config.calendar.first_window_start(now) == horizon
    land(config, [(i, i, horizon - MINUTE + i * MINUTE + 1_000) for i in range(3)])
    keys = [window_key(config, horizon + i * MINUTE) for i in range(3)]  # one before, two in

    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text(LAUNCH_AT_ONCE)
    quiet_instance(home)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    an_hour_ago = now - HOUR  # the definitions as they loaded then
    then = build_definitions(config, an_hour_ago)
    job = then.resolve_job_def(ALL_WINDOWS_JOB)
    with DagsterInstance.get() as instance:
        run = job.execute_in_process(tags=range_tags(keys[0], keys[2]), instance=instance)
        assert run.success
        # The status Dagster caches for the asset, computed while the start lay earlier.
        status = instance.get_status_by_partition(
            AssetKey([SOURCE, "changes"]), keys, window_partitions(config, an_hour_ago)
        )
    assert status is not None and {k: s.value for k, s in status.items()} == dict.fromkeys(
        keys, "MATERIALIZED"
    )

    with running_webserver(tmp_path / "reclock.yaml", home) as base_url:
        listed_before = window_partitions(config, int(time.time() * 1000)).get_num_partitions()
        (node,) = graphql(base_url, STATUS_QUERY)["assetNodes"]
        # a minute may pass
        listed_after = window_partitions(config, int(time.time() * 1000)).get_num_partitions()
        # The daily maintenance, launched from the webserver, has it load the definitions
        # again (their partitions start anew): the location's load time moves past its run.
        loaded = location_loaded_at(base_url)
        log = run_launched(base_url, MAINTENANCE_JOB)
        assert location_loaded_at(base_url) > loaded
    assert f"code location {LOCATION} reloaded by {base_url}" in log
    assert node["partitionStats"]["numMaterialized"] == 2
    assert listed_before <= node["partitionStats"]["numPartitions"] <= listed_after
    assert listed_after <= MAX_PARTITIONS
    materialized = [r for r in node["assetPartitionStatuses"]["ranges"]
                    if r["status"] == "MATERIALIZED"]  # fmt: skip
    assert [(r["startKey"], r["endKey"]) for r in materialized] == [(keys[1], keys[2])]


# Runs launched through the webserver start at once (no daemon to dequeue them).
LAUNCH_AT_ONCE = """run_coordinator:
  module: dagster.core.run_coordinator
  class: DefaultRunCoordinator
"""
LOCATION = "pipelines.definitions"  # how running_webserver names its code location
LOCATIONS_QUERY = """
{ workspaceOrError { ... on Workspace { locationEntries { name updatedTimestamp } } } }
"""
LAUNCH_MUTATION = """
mutation {
  launchRun(executionParams: {selector: {repositoryLocationName: "%s",
    repositoryName: "__repository__", jobName: "%s"}}) {
    __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  }
}
"""
RUN_QUERY = """
{ runOrError(runId: "%s") { ... on Run { status
    eventConnection(afterCursor: null, limit: 1000) {
      events { ... on MessageEvent { message } } } } } }
"""


def location_loaded_at(base_url: str) -> float:
    """When the webserver last loaded the code location."""
    entries = graphql(base_url, LOCATIONS_QUERY)["workspaceOrError"]["locationEntries"]
    return next(float(e["updatedTimestamp"]) for e in entries if e["name"] == LOCATION)


def run_launched(base_url: str, job: str, timeout_s: float = 300) -> str:
    """Launch ``job`` through the webserver, as the UI or a schedule does, and wait for it
    to succeed; its log messages, one per line."""
    launched = graphql(base_url, LAUNCH_MUTATION % (LOCATION, job))["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = graphql(base_url, RUN_QUERY % run_id)["runOrError"]
        if run["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
            messages = [e.get("message") or "" for e in run["eventConnection"]["events"]]
            assert run["status"] == "SUCCESS", "\n".join(messages)
            return "\n".join(messages)
        time.sleep(1)
    raise AssertionError(f"run {run_id} of {job} did not finish in {timeout_s:.0f} s")


def test_materialize_refuses_windows_before_the_horizon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Asking only for windows Dagster no longer lists fails at once, naming the horizon,
    without starting Spark or a run."""
    now = away_from_the_hour()
    start = now // MS_PER_DAY * MS_PER_DAY - 365 * MS_PER_DAY
    config = write_config(tmp_path, start)
    assert not materialize(config, start + MINUTE)
    horizon = datetime.fromtimestamp(config.calendar.first_window_start(now) / 1000, UTC)
    assert f"first window Dagster still lists starts at {horizon:%Y-%m-%dT%H:%M:%SZ}" in (
        capsys.readouterr().err
    )
    assert not config.lake.exists()
