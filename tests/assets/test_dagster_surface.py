"""The Dagster surface of reclock, run in process against the real ``Definitions``.

A tiny deployment (one upsert source, two Kafka partitions, three one-minute windows)
goes through the job, the single-run backfill, the landing-zone sensor and the schedule
the way Dagster drives them. Expected tables and frontiers are written by hand from
the records below, never produced by the code under test.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetKey,
    AssetSelection,
    DagsterInstance,
    Definitions,
    ExecuteInProcessResult,
    build_schedule_context,
    build_sensor_context,
    define_asset_job,
)
from dagster._core.storage import tags as dagster_tags
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from assets.partitions import range_tags, window_partitions
from assets.source_assets import ARRIVALS_TAG
from cdc_core.app.checks import (
    CONCURRENT_CHECKS,
    ChecksToJudge,
    JointJudgement,
    SourceCheck,
    judge_together,
)
from cdc_core.checks.invariants import CheckOutcome
from cdc_core.config import Config, ConfigError, parse_config
from cdc_core.frontier import iso
from cdc_core.ingest import Registry
from cdc_core.source import SourceReader
from pipelines.build import ALL_WINDOWS_JOB, build_definitions
from resources.lake import LakeResource
from resources.run_tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
START_MS = int(START.timestamp() * 1000)
MINUTE_MS = 60_000
KEYS = ("2026-01-01T00:00:00", "2026-01-01T00:01:00", "2026-01-01T00:02:00")
BINDING_TIMES = tuple(START_MS + (i + 1) * MINUTE_MS for i in range(len(KEYS)))
SOURCE = "users"
OUTPUTS = ("remap", "reclocked", "changes", "state", "errors")


@dataclass(frozen=True)
class Rec:
    """A Kafka record of the ``users`` topic; ``ts`` in seconds after START."""

    partition: int
    offset: int
    seconds: int
    key_id: int
    payload: str | None


# Event-time reclocking binds, per partition, the offsets whose running maximum timestamp
# lies below the window end: window 1 takes offset 0 of both partitions, window 2 offset 1,
# window 3 offsets 2 and up.
FIRST_DUMP = (
    Rec(0, 0, 10, 1, '{"name": "Ada"}'),
    Rec(1, 0, 20, 2, '{"name": "Grace"}'),
    Rec(0, 1, 70, 1, '{"name": "Ada L."}'),
)
SECOND_DUMP = (
    Rec(1, 1, 80, 2, None),  # deletes key 2
    Rec(0, 2, 130, 3, '{"name": "Linus"}'),
    Rec(1, 2, 140, 4, '{"name": "Edsger"}'),
    Rec(1, 3, 150, 5, '{"name": '),  # undecodable value: an error, never a row
)
# Current rows after each window, by hand: (id, name).
STATE_AFTER = (
    {(1, "Ada"), (2, "Grace")},
    {(1, "Ada L.")},
    {(1, "Ada L."), (3, "Linus"), (4, "Edsger")},
)
# Updates of `changes` at the binding time of window 2: -Ada +Ada L. (key 1), -Grace (key 2).
CHANGES_AT_WINDOW_2 = 3


def write_dump(path: Path, records: Sequence[Rec]) -> Path:
    """kcat -J lines, the way the landing zone receives them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "topic": SOURCE,
                "partition": r.partition,
                "offset": r.offset,
                "tstype": "create",
                "ts": START_MS + r.seconds * 1000,
                "broker": 1,
                "headers": [],
                "key": json.dumps({"id": r.key_id}),
                "payload": r.payload,
            }
        )
        for r in records
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def deployment_data(lake: str = "lake") -> dict:
    """The tiny deployment's config file contents; its windows all lie in the past."""
    return {
        "lake": lake,
        "landing": "landing",
        "window": "1m",
        "start": "2026-01-01T00:00:00Z",
        "end": "2026-01-01T00:03:00Z",
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
        "sources": [
            {
                "name": SOURCE,
                "topic": SOURCE,
                "key": {"id": "bigint"},
                "value": {"name": "string"},
                "envelope": "upsert",
                "reclock": "event-time",
                "expectations": [
                    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}}
                ],
            }
        ],
    }


def deployment(workdir: Path, *, lake: str = "lake") -> Config:
    return parse_config(deployment_data(lake), workdir)


def landed(workdir: Path) -> Config:
    """A deployment whose landing zone already holds both dumps."""
    config = deployment(workdir)
    write_dump(config.landing / SOURCE / "a.json", FIRST_DUMP)
    write_dump(config.landing / SOURCE / "later" / "b.json", SECOND_DUMP)
    return config


def table_rows(config: Config, output: str) -> list[dict]:
    return DeltaTable(str(config.lake / SOURCE / output)).to_pyarrow_table().to_pylist()


def state_rows(config: Config) -> set[tuple[int, str]]:
    return {(row["id"], row["name"]) for row in table_rows(config, "state")}


def materializations(result: ExecuteInProcessResult, output: str) -> list:
    key = AssetKey([SOURCE, output])
    return [
        event.materialization
        for event in result.get_asset_materialization_events()
        if event.materialization.asset_key == key
    ]


def check_evaluations(result: ExecuteInProcessResult) -> dict[str, AssetCheckEvaluation]:
    """Evaluations by ``<asset>.<check>``."""
    return {
        f"{e.asset_key.path[-1]}.{e.check_name}": e for e in result.get_asset_check_evaluations()
    }


def value(metadata: dict, name: str) -> object:
    return metadata[name].value


EXPECTED_CHECKS = {
    "remap.complete",
    "remap.monotone",
    "reclocked.complete",
    "reclocked.exactly_once",
    "changes.complete",
    "changes.state_is_set",
    "changes.expectations",
    "changes.readers",
    "errors.complete",
    "errors.accounted",
}


@dataclass(frozen=True)
class TwoRuns:
    config: Config
    runs: tuple[ExecuteInProcessResult, ...]
    states: tuple[set[tuple[int, str]], ...]


@pytest.fixture(scope="module")
def two_runs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> TwoRuns:
    """Windows 1 and 2 materialized in order, one run each, through the real job."""
    config = landed(tmp_path_factory.mktemp("two_runs"))
    job = build_definitions(config).resolve_job_def(ALL_WINDOWS_JOB)
    instance = DagsterInstance.ephemeral()
    runs, states = [], []
    for key in KEYS[:2]:
        runs.append(job.execute_in_process(partition_key=key, instance=instance))
        states.append(state_rows(config))
    return TwoRuns(config, tuple(runs), tuple(states))


def test_two_windows_in_order_advance_outputs_with_metadata(two_runs: TwoRuns) -> None:
    assert [run.success for run in two_runs.runs] == [True, True]
    assert two_runs.states == STATE_AFTER[:2]

    for run, key, binding in zip(two_runs.runs, KEYS, BINDING_TIMES, strict=False):
        for output in OUTPUTS:
            (event,) = materializations(run, output)
            assert event.partition == key
            assert {"dagster/row_count", "dagster/column_schema", "records_in"} <= set(
                event.metadata
            )
        (remap,) = materializations(run, "remap")
        assert value(remap.metadata, "upper") == (binding + 1) / 1000  # a timestamp, seconds
        (changes,) = materializations(run, "changes")
        columns = [c.name for c in value(changes.metadata, "dagster/column_schema").columns]
        assert columns == ["id", "name", "time", "diff"]
        (state,) = materializations(run, "state")
        columns = [c.name for c in value(state.metadata, "dagster/column_schema").columns]
        assert columns == ["id", "name"]

        evaluations = check_evaluations(run)
        assert set(evaluations) >= EXPECTED_CHECKS
        assert all(e.passed for e in evaluations.values()), {
            name: e.description for name, e in evaluations.items() if not e.passed
        }
        judged = evaluations["changes.complete"].metadata
        assert value(judged, "window_end") == binding / 1000  # a timestamp, in seconds
        assert value(judged, "partition") == key

    first, second = (materializations(run, "remap")[0].metadata for run in two_runs.runs)
    # Frontier per Kafka partition: next offset after the binding (hand-derived above).
    assert (value(first, "frontier/partition_0"), value(first, "frontier/partition_1")) == (1, 1)
    assert (value(second, "frontier/partition_0"), value(second, "frontier/partition_1")) == (2, 2)
    # Remap holds one row per partition and binding (a differential frontier: +new, -old).
    assert value(first, "dagster/row_count") == 2
    assert value(second, "dagster/row_count") == 6
    state_metadata = materializations(two_runs.runs[1], "state")[0].metadata
    assert value(state_metadata, "dagster/row_count") == len(STATE_AFTER[1])


def test_backfill_of_a_range_runs_once_and_equals_runs_in_order(
    two_runs: TwoRuns, tmp_path: Path
) -> None:
    config = landed(tmp_path)
    job = build_definitions(config).resolve_job_def(ALL_WINDOWS_JOB)
    instance = DagsterInstance.ephemeral()
    tags = {ASSET_PARTITION_RANGE_START_TAG: KEYS[0], ASSET_PARTITION_RANGE_END_TAG: KEYS[1]}
    result = job.execute_in_process(tags=tags, instance=instance)

    assert result.success
    assert len(instance.get_runs()) == 1
    assert state_rows(config) == STATE_AFTER[1]
    assert sorted_rows(config, "changes") == sorted_rows(two_runs.config, "changes")
    assert sorted_rows(config, "remap") == sorted_rows(two_runs.config, "remap")
    # Progress shows while the run goes: one log line per window, in order.
    progress = [
        message
        for event in instance.all_logs(result.run_id)
        if (message := event.user_message).startswith("[") and "record(s) in" in message
    ]
    assert [m.split("]")[0] + "]" for m in progress] == ["[1/2]", "[2/2]"]
    (remap,) = {event.metadata["upper"].value for event in materializations(result, "remap")}
    assert remap == (BINDING_TIMES[1] + 1) / 1000  # a timestamp, in seconds
    assert all(e.passed for e in check_evaluations(result).values())
    judged = check_evaluations(result)["changes.complete"].metadata
    assert value(judged, "partition") == f"{KEYS[0]} .. {KEYS[1]}"
    assert value(judged, "windows") == 2

    # Each window's materialization carries that window's own figures, by hand: window 1
    # binds offset 0 of both partitions, window 2 offset 1; the dumps end at offsets 3 and
    # 4 (7 registered), the newest record at 150 s.
    by_window = {
        output: {e.partition: e.metadata for e in materializations(result, output)}
        for output in ("reclocked", "changes")
    }
    assert set(by_window["changes"]) == set(KEYS[:2])
    figures = {
        key: (
            value(by_window["reclocked"][key], "records_in"),
            value(by_window["changes"][key], "updates_out"),
            value(by_window["changes"][key], "lag_offsets"),
            value(by_window["changes"][key], "lag_seconds"),
            value(by_window["changes"][key], "coverage"),
            value(by_window["changes"][key], "window_end"),
        )
        for key in KEYS[:2]
    }
    assert figures == {
        KEYS[0]: (2, 2, 5, 90.0, 2 / 7, BINDING_TIMES[0] / 1000),
        KEYS[1]: (2, CHANGES_AT_WINDOW_2, 3, 30.0, 4 / 7, BINDING_TIMES[1] / 1000),
    }

    # Per phase and per window as it happens: each window's rows are logged when the
    # append that wrote them ends, before state is published.
    messages = [event.user_message for event in instance.all_logs(result.run_id)]
    appended = [
        i for i, m in enumerate(messages) if m.startswith(f"{SOURCE}: append changes: window ")
    ]
    assert [messages[i] for i in appended] == [
        f"{SOURCE}: append changes: window {KEYS[0]}: 2 row(s)",
        f"{SOURCE}: append changes: window {KEYS[1]}: {CHANGES_AT_WINDOW_2} row(s)",
    ]
    published = messages.index(next(m for m in messages if m.startswith(
        f"{SOURCE}: publish state done"
    )))
    assert max(appended) < published


def sorted_rows(config: Config, output: str) -> list[tuple]:
    return sorted(tuple(row.values()) for row in table_rows(config, output))


MIRROR = "mirror"  # a second source on the same topic: its rows are users', by hand


def two_sources(workdir: Path) -> Config:
    """The tiny deployment with a second source, ``mirror``, reading the same topic (so
    the rows written by hand for ``users`` are its rows too), both dumps landed."""
    data = deployment_data()
    data["sources"].append({**data["sources"][0], "name": MIRROR})
    config = parse_config(data, workdir)
    write_dump(config.landing / SOURCE / "a.json", FIRST_DUMP)
    write_dump(config.landing / SOURCE / "later" / "b.json", SECOND_DUMP)
    return config


def rows_of(config: Config, source: str) -> set[tuple[int, str]]:
    """A source's ``state``, as delta-rs reads it."""
    table = DeltaTable(str(config.lake / source / "state")).to_pyarrow_table()
    return {(row["id"], row["name"]) for row in table.to_pylist()}


def test_a_ui_pick_of_one_sources_tables_runs_that_source_alone(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Every source's assets are one multi-asset: a run selecting one source's tables (as
    the UI launches it) serves that source only, with its checks; the other source's
    folder is never created, not even its dump registry."""
    config = two_sources(tmp_path)
    job = build_definitions(config).resolve_job_def(ALL_WINDOWS_JOB)
    picked = [AssetKey([MIRROR, output]) for output in OUTPUTS]
    result = job.execute_in_process(
        partition_key=KEYS[0], asset_selection=picked, instance=DagsterInstance.ephemeral()
    )

    assert result.success
    materialized = {e.materialization.asset_key for e in result.get_asset_materialization_events()}
    assert materialized == set(picked)
    assert {e.asset_key.path[0] for e in result.get_asset_check_evaluations()} == {MIRROR}
    assert rows_of(config, MIRROR) == STATE_AFTER[0]
    assert sorted(p.name for p in config.lake.iterdir()) == [MIRROR]


@pytest.mark.parametrize("per_step", [2, 1], ids=["one step", "a step per source"])
def test_a_source_that_fails_leaves_the_others_exact_and_the_run_names_it(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_step: int
) -> None:
    """``users`` cannot be opened (a rebuild's swap was cut short: every open refuses
    it) and comes first in the config; ``mirror`` still runs whole (tables, checks,
    export) and equals the rows by hand, then the step of ``users`` fails naming it
    alone. With a step per source, the run's first step serves both sources (every phase
    is logged there) and the other only reports."""
    monkeypatch.setattr("assets.deployment.SOURCES_PER_STEP", per_step)
    config = two_sources(tmp_path)
    marker = config.lake / ".rebuild" / f"{SOURCE}.swap"
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"step": "move old tables aside", "kept": None}))
    job = build_definitions(config).resolve_job_def(ALL_WINDOWS_JOB)
    instance = DagsterInstance.ephemeral()
    result = job.execute_in_process(
        partition_key=KEYS[0], instance=instance, raise_on_error=False
    )

    assert not result.success
    assert rows_of(config, MIRROR) == STATE_AFTER[0]
    materialized = {e.materialization.asset_key for e in result.get_asset_materialization_events()}
    assert materialized == {AssetKey([MIRROR, name]) for name in (*OUTPUTS, "changes_cdcv2")}
    evaluations = {f"{e.asset_key.path[-1]}.{e.check_name}": e
                   for e in result.get_asset_check_evaluations()}  # fmt: skip
    assert {e.asset_key.path[0] for e in evaluations.values()} == {MIRROR}
    assert set(evaluations) == EXPECTED_CHECKS and all(e.passed for e in evaluations.values())
    (failure,) = [event for event in result.all_events if event.is_step_failure]
    message = failure.step_failure_data.error.cause.message  # under Dagster's own wrapper
    assert message.startswith(f"assets.deployment.SourcesFailed: 1 of {per_step} source(s) failed")
    steps = {e.step_key for e in result.all_events if e.is_step_success or e.is_step_failure}
    assert steps == ({"sources"} if per_step == 2 else {"sources_1", "sources_2"})
    first = next(e.step_key for e in result.all_events if e.is_step_start)
    phases = {e.step_key for e in instance.all_logs(result.run_id) if " done in " in e.user_message}
    assert phases == {first}, phases
    assert f"{SOURCE}: RebuildUnfinished" in message and MIRROR not in message
    # A named error is logged as one line that says what failed, never as a trace.
    errors = [e.user_message for e in instance.all_logs(result.run_id) if e.level == logging.ERROR]
    (logged,) = [message for message in errors if message.startswith(SOURCE)]
    assert logged.startswith(f"{SOURCE} failed: source {SOURCE!r} is being rebuilt"), logged
    assert "\n" not in logged and "Traceback" not in logged, logged


def test_sensor_looks_without_writing_and_asks_only_for_windows_a_dump_can_change(
    spark: SparkSession, tmp_path: Path
) -> None:
    config = deployment(tmp_path)
    definitions = build_definitions(config)
    lake = {"lake": LakeResource(root=str(config.lake), landing=str(config.landing))}
    registry = Registry(config.lake / SOURCE / "dumps", SOURCE)
    first_dump = write_dump(config.landing / SOURCE / "a.json", FIRST_DUMP)

    # A fresh cursor on an empty lake: every closed window can change. The tick (or a
    # preview, the same evaluation) writes nothing: no lake, no registration.
    before = now_ms()
    first = tick(definitions, DagsterInstance.ephemeral(), lake, None)
    after = now_ms()
    (request,) = first.run_requests
    assert request.run_key == f"windows:{KEYS[0]}..{KEYS[2]}@0"
    assert (request.tags[ASSET_PARTITION_RANGE_START_TAG],
            request.tags[ASSET_PARTITION_RANGE_END_TAG]) == (KEYS[0], KEYS[2])
    seen = json.loads(request.tags[ARRIVALS_TAG])
    assert list(seen) == [str(first_dump)] and before <= seen[str(first_dump)] <= after
    assert not config.lake.exists() and registry.files() == []
    # Repeated on the same state, the request has the same run key: Dagster runs it once.
    again = tick(definitions, DagsterInstance.ephemeral(), lake, None)
    assert [r.run_key for r in again.run_requests] == [request.run_key]

    # The run registers the file with the arrival time the sensor saw.
    job = definitions.resolve_job_def(ALL_WINDOWS_JOB)
    tags = {**range_tags(KEYS[0], KEYS[1]), ARRIVALS_TAG: request.tags[ARRIVALS_TAG]}
    assert job.execute_in_process(tags=tags, instance=DagsterInstance.ephemeral()).success
    assert [(Path(f.path).name, f.arrival_ms) for f in registry.files()] == [
        ("a.json", seen[str(first_dump)])
    ]

    # A late dump: windows 1 and 2 are in the outputs and cannot change; only window 3
    # is asked for, though the cursor says it was requested already.
    late = write_dump(config.landing / SOURCE / "later" / "b.json", SECOND_DUMP)
    versions = {name: DeltaTable(str(config.lake / SOURCE / name)).version() for name in OUTPUTS}
    second = tick(definitions, DagsterInstance.ephemeral(), lake, first.cursor)
    (request,) = second.run_requests
    assert request.run_key == f"windows:{KEYS[2]}..{KEYS[2]}@{BINDING_TIMES[1] + 1}"
    assert request.partition_key == KEYS[2]  # one window: its checks' results attach to it
    assert list(json.loads(request.tags[ARRIVALS_TAG])) == [str(late)]
    assert [Path(f.path).name for f in registry.files()] == ["a.json"]
    assert versions == {
        name: DeltaTable(str(config.lake / SOURCE / name)).version() for name in OUTPUTS
    }

    # Nothing new since: no request; the file keeps its first sighting in the cursor.
    third = tick(definitions, DagsterInstance.ephemeral(), lake, second.cursor)
    assert third.run_requests == [] and third.skip_message
    assert json.loads(third.cursor)["seen"] == json.loads(second.cursor)["seen"]


def tick(definitions: Definitions, instance: DagsterInstance, resources: dict, cursor: str | None):
    """One tick of the sensor, resolved against the definitions as the daemon resolves it
    (a one-window request names its partition key, which Dagster checks)."""
    context = build_sensor_context(
        instance=instance, cursor=cursor, resources=resources,
        repository_def=definitions.get_repository_def(),
    )
    return definitions.resolve_sensor_def("new_dumps").evaluate_tick(context)


def now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


def test_closed_windows_by_hand_without_an_end(tmp_path: Path) -> None:
    config = parse_config({**deployment_data(), "end": None}, tmp_path)
    assert config.end_ms is None
    assert config.calendar.closed_windows(BINDING_TIMES[0], BINDING_TIMES[2] + 5_000) == [
        (KEYS[1], BINDING_TIMES[1]),
        (KEYS[2], BINDING_TIMES[2]),
    ]
    assert config.calendar.closed_windows(-1, START_MS + MINUTE_MS - 1) == []


@settings(max_examples=60, deadline=None)
@given(
    window=st.sampled_from([("1m", 1), ("5m", 5), ("15m", 15), ("1h", 60)]),
    windows=st.integers(1, 40),
    after=st.integers(-2, 45),
    through=st.integers(-2, 45),
    jitter=st.integers(0, 59_999),
)
def test_closed_windows_equal_the_partitions_dagster_lists(
    window: tuple[str, int], windows: int, after: int, through: int, jitter: int
) -> None:
    """The sensor's closed windows are exactly Dagster's partitions whose end lies in
    ``(after, through]``, wherever the bounds fall inside or outside a window."""
    text, minutes = window
    end = START + timedelta(minutes=minutes * windows)
    config = parse_config({**deployment_data(), "window": text, "end": end}, Path("/unused"))
    after_ms = config.start_ms + after * config.window_ms // 4 + jitter
    through_ms = config.start_ms + through * config.window_ms + jitter
    partitions = window_partitions(config, config.start_ms)
    expected = [
        (key, int(partitions.time_window_for_partition_key(key).end.timestamp() * 1000))
        for key in partitions.get_partition_keys()
    ]
    assert config.calendar.closed_windows(after_ms, through_ms) == [
        (key, end) for key, end in expected if after_ms < end <= through_ms
    ]


@pytest.mark.parametrize(
    ("tick_at", "expected_key"),
    [
        (START + timedelta(minutes=2, seconds=5), KEYS[1]),
        (START + timedelta(minutes=3), KEYS[2]),
        (START + timedelta(minutes=1), KEYS[0]),
    ],
)
def test_schedule_requests_the_latest_closed_window(
    tmp_path: Path, tick_at: datetime, expected_key: str
) -> None:
    definitions = build_definitions(deployment(tmp_path))
    schedule = definitions.resolve_schedule_def("latest_closed_window")
    context = build_schedule_context(
        scheduled_execution_time=tick_at, repository_def=definitions.get_repository_def()
    )
    (request,) = schedule.evaluate_tick(context).run_requests
    assert request.partition_key == expected_key


def test_schedule_cron_follows_the_window_and_stops_after_the_end(tmp_path: Path) -> None:
    five_minutes = parse_config(
        {**deployment_data(), "window": "5m", "end": "2026-01-01T00:15:00Z"}, tmp_path
    )
    schedule = build_definitions(five_minutes).resolve_schedule_def("latest_closed_window")
    assert schedule.cron_schedule == "*/5 * * * *"
    assert schedule.description

    definitions = build_definitions(deployment(tmp_path))
    schedule = definitions.resolve_schedule_def("latest_closed_window")
    after_end = build_schedule_context(
        scheduled_execution_time=START + timedelta(minutes=4),
        repository_def=definitions.get_repository_def(),
    )
    result = schedule.evaluate_tick(after_end)
    assert result.run_requests == []
    assert "2026-01-01T00:03:00Z" in (result.skip_message or "")


def test_job_sensor_schedule_and_every_check_have_a_description(tmp_path: Path) -> None:
    definitions = build_definitions(deployment(tmp_path))
    assert definitions.resolve_job_def(ALL_WINDOWS_JOB).description
    assert definitions.resolve_sensor_def("new_dumps").description
    assert definitions.resolve_schedule_def("latest_closed_window").description
    specs = [spec for assets in definitions.assets for spec in assets.check_specs]
    assert {f"{s.asset_key.path[-1]}.{s.name}" for s in specs} == EXPECTED_CHECKS
    assert all(spec.description for spec in specs)


def test_completeness_check_names_the_window_and_times_of_rows_dropped_behind_its_back(
    two_runs: TwoRuns, tmp_path: Path
) -> None:
    """Drop one row of window 2 from a committed data file of ``changes`` (same path,
    Delta log untouched), then run the source's checks alone on that window."""
    lake = tmp_path / "lake"
    shutil.copytree(two_runs.config.lake, lake)
    config = deployment(two_runs.config.lake.parent, lake=str(lake))
    changes = config.lake / SOURCE / "changes"
    binding = BINDING_TIMES[1]
    dropped = drop_one_row_at(changes, binding)
    assert dropped

    result = run_checks_alone(config, [AssetKey([SOURCE, "changes"])], KEYS[1])

    evaluations = check_evaluations(result)
    complete = evaluations["changes.complete"]
    assert not complete.passed
    assert iso(binding) in complete.description
    window = [datetime.fromtimestamp(value(complete.metadata, f"window_{side}"), UTC)
              for side in ("start", "end")]
    assert [moment.isoformat() for moment in window] == [
        "2026-01-01T00:01:00+00:00", "2026-01-01T00:02:00+00:00"
    ]
    figures = value(complete.metadata, "figures")
    assert figures["mismatches"] == [
        {"time": binding, "announced": CHANGES_AT_WINDOW_2, "found": CHANGES_AT_WINDOW_2 - 1}
    ]
    # The untouched reclocked shard still passes, judged on the same window.
    rerun = run_checks_alone(config, [AssetKey([SOURCE, "reclocked"])], KEYS[1])
    assert all(e.passed for e in check_evaluations(rerun).values())


def test_a_check_that_cannot_run_fails_the_step_after_the_others_reported(
    two_runs: TwoRuns, tmp_path: Path
) -> None:
    """Every data file of ``reclocked`` lost behind the log's back: the checks that read
    it raise; every other check of the source still reports, then the step fails."""
    lake = tmp_path / "lake"
    shutil.copytree(two_runs.config.lake, lake)
    config = deployment(two_runs.config.lake.parent, lake=str(lake))
    for uri in DeltaTable(str(config.lake / SOURCE / "reclocked")).file_uris():
        Path(uri.removeprefix("file://")).unlink()

    outputs = [AssetKey([SOURCE, output]) for output in ("remap", "reclocked", "changes", "errors")]
    result = run_checks_alone(config, outputs, KEYS[1])

    assert not result.success
    reading_reclocked = {"reclocked.complete", "reclocked.exactly_once", "errors.accounted"}
    evaluations = check_evaluations(result)
    assert set(evaluations) == EXPECTED_CHECKS - reading_reclocked
    assert all(e.passed for e in evaluations.values())


def drop_one_row_at(table_path: Path, time: int) -> bool:
    """Rewrite the first data file holding rows at ``time`` without one of them."""
    for uri in DeltaTable(str(table_path)).file_uris():
        path = uri.removeprefix("file://")
        rows = pq.read_table(path)
        at_time = pc.equal(rows["time"], time)
        if pc.any(at_time).as_py():
            first = pc.index(at_time, True).as_py()
            pq.write_table(pa.concat_tables([rows.slice(0, first), rows.slice(first + 1)]), path)
            return True
    return False


def run_checks_alone(
    config: Config, assets: Sequence[AssetKey], partition_key: str
) -> ExecuteInProcessResult:
    """Run only the checks of ``assets``, judging one window (a run over the range of
    that single window: a checks-only job has no asset to carry a partition key)."""
    checks_job = define_asset_job(
        "checks_only", selection=AssetSelection.checks_for_assets(*assets)
    )
    merged = Definitions.merge(build_definitions(config), Definitions(jobs=[checks_job]))
    return merged.resolve_job_def("checks_only").execute_in_process(
        tags=range_tags(partition_key, partition_key),
        instance=DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


def test_owners_and_tags_follow_the_config(tmp_path: Path) -> None:
    data = deployment_data()
    data["sources"][0]["owners"] = ["team:accounts", "ada@example.com"]
    definitions = build_definitions(parse_config(data, tmp_path))
    specs = [spec for assets in definitions.assets for spec in assets.specs]
    assert {spec.key.path[-1] for spec in specs} == {*OUTPUTS, "changes_cdcv2"}
    for spec in specs:
        assert list(spec.owners) == ["team:accounts", "ada@example.com"]
        assert {k: v for k, v in spec.tags.items() if k.startswith("reclock/")} == {
            "reclock/envelope": "upsert", "reclock/policy": "event-time"
        }

    data["sources"][0]["owners"] = ["accounts"]
    refused = r"sources\[0\]\.owners\[0\]: must be an e-mail address or team:<name>"
    with pytest.raises(ConfigError, match=refused):
        parse_config(data, tmp_path)


def test_each_table_carries_its_uri_and_a_registered_one_its_catalog_name(
    tmp_path: Path,
) -> None:
    data = deployment_data()
    data["catalog"] = {"kind": "glue", "database": "shop", "table_names": "raw_{source}_{table}"}
    definitions = build_definitions(parse_config(data, tmp_path))
    specs = {spec.key.path[-1]: spec.metadata for assets in definitions.assets
             for spec in assets.specs}  # fmt: skip
    for table in OUTPUTS:
        assert specs[table]["dagster/uri"] == f"file://{tmp_path}/lake/{SOURCE}/{table}"
    names = {t: m.get("dagster/table_name") for t, m in specs.items() if t in OUTPUTS}
    assert names == {"remap": None, "reclocked": None, "changes": f"shop.raw_{SOURCE}_changes",
                     "state": f"shop.raw_{SOURCE}_state", "errors": f"shop.raw_{SOURCE}_errors"}
    unregistered = build_definitions(parse_config(deployment_data(), tmp_path))
    assert not any("dagster/table_name" in spec.metadata
                   for assets in unregistered.assets for spec in assets.specs)  # fmt: skip


def test_checks_of_several_sources_are_judged_at_once_and_report_in_their_order(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two sources' checks judged together: each source's checks judged alone wait at
    one barrier with the other source's, so judged one source after another the first
    would wait alone and break it. A check with a joint judgement is answered once for
    both sources, their questions in order. Each source's outcomes keep its checks'
    order, and what a check raises is its outcome while the others still judge."""
    data = deployment_data()
    for name in ("orders", "broken"):
        data["sources"].append({**data["sources"][0], "name": name, "topic": name})
    config = parse_config(data, tmp_path)
    # A source whose table cannot be read: every check of it fails to judge, alone.
    log = tmp_path / "lake" / "broken" / "remap" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("{not json\n")
    assert len(config.sources) <= CONCURRENT_CHECKS
    barrier = threading.Barrier(len(config.sources) - 1, timeout=30)
    answered: list[list[str]] = []

    def alone(name: str) -> SourceCheck:
        def judge(reader: SourceReader, _start: int, _end: int) -> CheckOutcome:
            barrier.wait()
            if name == "raises":
                raise ValueError(f"cannot judge {reader.source.name}")
            return CheckOutcome(True, f"{reader.source.name} {name}")

        return SourceCheck("reclocked", name, judge, "")

    def answer(_spark: SparkSession, questions: Sequence[str]) -> list[CheckOutcome]:
        answered.append(list(questions))
        return [CheckOutcome(True, f"{question} jointly") for question in questions]

    joint = JointJudgement(lambda reader, _s, _e: reader.source.name, answer)
    chosen = [alone("a"), SourceCheck.jointly("changes", "joint", joint, ""), alone("raises")]
    window = (config.start_ms, config.start_ms + config.window_ms)
    asked = [ChecksToJudge(source, tmp_path / "lake", window, chosen) for source in config.sources]

    judged = judge_together(spark, config, asked)

    assert answered == [[SOURCE, "orders"]]
    *readable, broken = judged
    assert broken.window is None
    assert all(isinstance(outcome, Exception) for _, outcome in broken.judged)
    for source, verdicts in zip(config.sources, readable, strict=False):
        outcomes = [outcome for _, outcome in verdicts.judged]
        assert verdicts.source == source and verdicts.window == window
        assert [getattr(o, "description", None) for o in outcomes[:2]] == [
            f"{source.name} a", f"{source.name} jointly"]  # fmt: skip
        assert isinstance(outcomes[2], ValueError) and source.name in str(outcomes[2])


def test_the_run_tags_read_are_the_ones_dagster_writes() -> None:
    """reclock names Dagster's documented run tags itself (no public constant exports
    them); they must be the very tags Dagster writes on a partitioned run."""
    assert (PARTITION_NAME_TAG, ASSET_PARTITION_RANGE_START_TAG, ASSET_PARTITION_RANGE_END_TAG) == (
        dagster_tags.PARTITION_NAME_TAG,
        dagster_tags.ASSET_PARTITION_RANGE_START_TAG,
        dagster_tags.ASSET_PARTITION_RANGE_END_TAG,
    )
