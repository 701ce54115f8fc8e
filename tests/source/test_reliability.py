"""Documented workflows that must survive: retire then run on, concurrent runs and
exports of one window, late redeliveries, and the ``accounted`` check that no
registered record is lost silently.

One source, four one-minute windows. The lake under test materializes windows 1-2,
retires, receives the dumps of windows 3-4 and materializes again; a reference lake gets
every dump at once and materializes once. Both must hold the same rows.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from dagster import DagsterInstance, ExecuteInProcessResult
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from assets.partitions import range_tags
from cdc_core.app.export import ABANDONED_AFTER_S, Window, export_windows, work_folder
from cdc_core.cdcv2 import DataColumns, codec_json
from cdc_core.cdcv2.reference import read_all
from cdc_core.config import Config, load_config
from cdc_core.frontier import TimeFrontier
from cdc_core.reclock import Windows
from cdc_core.source import SourcePipeline
from pipelines.build import ALL_WINDOWS_JOB, build_definitions
from pipelines.cli import main
from pipelines.run import materialize
from tests.connect_server import REPO, attached, client_env
from tests.upsert_config import write_upsert_config

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
WINDOW = 60_000
KEYS = [f"2026-01-01T00:0{i}:00" for i in range(4)]

# (partition, offset, ts, id, name or None for a delete); windows 1-2 land first.
EARLY = [
    (0, 0, T0 + 1_000, 1, "ada"),
    (0, 1, T0 + 2_000, 2, "bob"),
    (1, 0, T0 + 3_000, 3, "cy"),
    (0, 2, T0 + WINDOW + 1_000, 1, "ada2"),
    (1, 1, T0 + WINDOW + 2_000, 4, "dee"),
]
LATE = [
    (0, 3, T0 + 2 * WINDOW + 1_000, 2, None),
    (1, 2, T0 + 2 * WINDOW + 2_000, 5, "eve"),
    (0, 4, T0 + 3 * WINDOW + 1_000, 3, "cy2"),
    (1, 3, T0 + 3 * WINDOW + 2_000, 6, "fay"),
]
FINAL_STATE = {(1, "ada2"), (3, "cy2"), (4, "dee"), (5, "eve"), (6, "fay")}


def dump(records: list[tuple]) -> str:
    lines = []
    for partition, offset, ts, key, name in records:
        payload = None if name is None else json.dumps({"name": name})
        lines.append(json.dumps({"topic": "users", "partition": partition, "offset": offset,
                                 "ts": ts, "key": json.dumps({"id": key}),
                                 "payload": payload}))  # fmt: skip
    return "\n".join(lines) + "\n"


def write_config(workdir: Path) -> Path:
    return write_upsert_config(workdir, end="2026-01-01T00:04:00Z", source={"history": True})


def run_job(config: Config, first: str, last: str) -> ExecuteInProcessResult:
    """The job over windows ``first .. last``, checks included, exports left out."""
    job = build_definitions(config).resolve_job_def(ALL_WINDOWS_JOB)
    return job.execute_in_process(
        instance=DagsterInstance.ephemeral(),
        tags=range_tags(first, last),
        raise_on_error=False,
    )


def checks_of(result: ExecuteInProcessResult) -> dict[str, bool]:
    return {
        f"{e.asset_key.path[-1]}.{e.check_name}": e.passed
        for e in result.get_asset_check_evaluations()
    }


def consolidated(config: Config, table: str) -> Counter:
    """A shard's rows (data, time) with their summed diffs, zeros dropped."""
    totals: Counter = Counter()
    for row in DeltaTable(str(config.lake / "users" / table)).to_pyarrow_table().to_pylist():
        diff = row.pop("diff")
        totals[tuple(sorted(row.items()))] += diff
    return Counter({key: diff for key, diff in totals.items() if diff})


def state(config: Config) -> set[tuple[int, str]]:
    rows = DeltaTable(str(config.lake / "users" / "state")).to_pyarrow_table().to_pylist()
    return {(row["id"], row["name"]) for row in rows}


def history(config: Config) -> Counter:
    rows = DeltaTable(str(config.lake / "users" / "history")).to_pyarrow_table().to_pylist()
    return Counter(tuple(sorted(row.items())) for row in rows)


@dataclass(frozen=True)
class Lakes:
    retired: Config
    reference: Config
    second_run: ExecuteInProcessResult


@pytest.fixture(scope="module")
def lakes(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Lakes:
    workdir = tmp_path_factory.mktemp("retired")
    path = write_config(workdir)
    config = load_config(path)
    (config.landing / "users" / "early.json").write_text(dump(EARLY))
    assert materialize(config, T0 + 2 * WINDOW, exports=False)
    assert main(["retire", "--config", str(path)]) == 0
    (config.landing / "users" / "late.json").write_text(dump(LATE))
    second = run_job(config, KEYS[0], KEYS[-1])

    reference_dir = tmp_path_factory.mktemp("reference")
    reference = load_config(write_config(reference_dir))
    (reference.landing / "users" / "early.json").write_text(dump(EARLY))
    (reference.landing / "users" / "late.json").write_text(dump(LATE))
    assert run_job(reference, KEYS[0], KEYS[-1]).success
    return Lakes(config, reference, second)


def test_retire_then_new_dumps_then_materialize_is_exact(lakes: Lakes) -> None:
    """The documented steady state: the run after a retire succeeds, every check passes,
    and the lake holds exactly what a lake that never retired holds."""
    config = lakes.retired
    assert not (config.landing / "users" / "early.json").exists(), "the retire archived it"
    remap = DeltaTable(str(config.lake / "users" / "remap"))
    assert remap.transaction_version("reclock.since") == T0 + 2 * WINDOW  # compacted by the retire
    assert lakes.second_run.success
    evaluations = checks_of(lakes.second_run)
    assert {"remap.complete", "remap.monotone", "errors.accounted"} <= set(evaluations)
    assert all(evaluations.values()), evaluations
    assert "history.versions" in evaluations
    assert state(config) == state(lakes.reference) == FINAL_STATE
    assert history(config) == history(lakes.reference)
    for table in ("reclocked", "changes", "errors"):
        assert consolidated(config, table) == consolidated(lakes.reference, table), table


def test_concurrent_exports_of_one_window_all_succeed_and_publish_one_stream(
    lakes: Lakes, spark: SparkSession
) -> None:
    """Four threads export the same window at once, three times over (threads, not
    processes: the race is on the window's folder, which threads reach as processes do).
    A young hidden folder of another run is left alone; an abandoned one is removed."""
    config = lakes.reference
    pipeline = SourcePipeline.from_config(spark, config, config.source("users"))
    root = config.lake / "users" / "cdcv2"
    key, start, end = KEYS[2], T0 + 2 * WINDOW, T0 + 3 * WINDOW
    work = work_folder(root)
    live = work / f".{key}.another-run.staging"
    abandoned = work / f".{key}.crashed-run.staging"
    for folder in (live, abandoned):
        folder.mkdir(parents=True)
    old = time.time() - ABANDONED_AFTER_S - 60
    os.utime(abandoned, (old, old))

    failures: list[BaseException] = []

    def export(barrier: threading.Barrier) -> None:
        try:
            barrier.wait()
            export_windows(pipeline.changes, root, [Window(key, start, end)])
        except BaseException as error:  # collected for the assert below
            failures.append(error)

    for _ in range(3):
        barrier = threading.Barrier(4)
        threads = [threading.Thread(target=export, args=(barrier,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert failures == []
    assert live.is_dir() and not abandoned.exists()
    assert (root / key).is_dir()
    assert [p.name for p in work.iterdir() if p.name.startswith(f".{key}.")] == [live.name]
    assert not any(p.name.startswith(".") for p in root.iterdir()), "root holds windows only"
    columns = DataColumns(config.source("users").output_schema)
    folder = root / key
    messages = [
        codec_json.decode(line, columns)
        for name in sorted(os.listdir(folder))
        for line in (folder / name).read_text().splitlines()
    ]
    updates, frontier = read_all(messages, TimeFrontier.at(start + 1))
    assert frontier == TimeFrontier.at(end + 1)
    rows = [(dict(data), diff) for data, diff in consolidated(config, "changes").items()]
    expected = {((r["id"], r["name"]), r["time"]): diff for r, diff in rows if r["time"] == end}
    assert expected, "the window has changes to export"
    assert {(tuple(data), t): d for data, t, d in updates} == expected


def test_the_accounted_check_goes_red_when_a_record_or_a_damaged_file_is_lost(
    lakes: Lakes, tmp_path: Path
) -> None:
    """A copy of the reference lake (its registry still names the reference's dumps),
    damaged behind reclock's back: a committed record deleted from ``reclocked``; and an
    empty dump landing after the last window, which no run can report any more. A
    window's check judges the ranges bound in the windows it checks (so its cost does not
    grow with history): the record's window is judged again by a run over every window,
    while the last window alone does not look back at it."""
    workdir = tmp_path / "copy"
    config = load_config(write_config(workdir))
    shutil.copytree(lakes.reference.lake, config.lake)
    (config.landing / "users" / "broken.json").write_bytes(b"")
    DeltaTable(str(config.lake / "users" / "reclocked")).delete("partition = 1 AND offset = 1")

    damaged = run_job(config, KEYS[0], KEYS[-1])
    last = run_job(config, KEYS[-1], KEYS[-1])

    assert checks_of(damaged)["errors.accounted"] is False
    description = next(
        e.description for e in damaged.get_asset_check_evaluations()
        if e.check_name == "accounted"
    )
    assert "early.json partition 1 offsets 0..1" in description
    assert str(config.landing / "users" / "broken.json") in description
    assert checks_of(last)["errors.accounted"] is False, "the dump nobody reported"
    described = next(
        e.description for e in last.get_asset_check_evaluations() if e.check_name == "accounted"
    )
    assert "early.json" not in described, "an earlier window's range is not judged again"
    assert checks_of(lakes.second_run)["errors.accounted"] is True


def test_a_late_redelivery_with_bad_lines_and_damage_is_reported_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Copies of records already bound land later, in a gzip file cut short and in a file
    with a malformed line: nothing is read twice, and their errors are reported by the
    next run, once (a run after that writes nothing new)."""
    config = load_config(write_config(tmp_path))
    pipeline = SourcePipeline.from_config(spark, config, config.source("users"))
    landing = config.landing / "users"
    (landing / "early.json").write_text(dump(EARLY))
    pipeline.register_dumps(arrival_ms=T0)
    pipeline.run_windows(Windows(T0, T0 + 2 * WINDOW, WINDOW))
    cut = gzip.compress(dump(EARLY * 20).encode(), compresslevel=1)
    (landing / "again.json.gz").write_bytes(cut[: len(cut) // 2])
    (landing / "again-bad.json").write_text(dump(EARLY[:2]) + "{not json\n")
    (landing / "late.json").write_text(dump(LATE))
    pipeline.register_dumps(arrival_ms=T0 + 10 * WINDOW)

    pipeline.run_windows(Windows(T0 + 2 * WINDOW, T0 + 4 * WINDOW, WINDOW))
    pipeline.run_windows(Windows(T0 + 2 * WINDOW, T0 + 4 * WINDOW, WINDOW))

    errors = DeltaTable(str(config.lake / "users" / "errors")).to_pyarrow_table().to_pylist()
    found = sorted((Path(e["file"]).name, e["reason"].split(" (")[0].split(":")[0], e["time"],
                    e["diff"]) for e in errors)  # fmt: skip
    first_binding = T0 + 3 * WINDOW  # the run's first window with records
    assert found == [
        ("again-bad.json", "not a JSON object", first_binding, 1),
        ("again.json.gz", "truncated gzip file", first_binding, 1),
    ]
    reclocked = DeltaTable(str(config.lake / "users" / "reclocked")).to_pyarrow_table()
    assert reclocked.num_rows == len(EARLY) + len(LATE), "no record was read twice"
    pipeline.finish()
    assert state(config) == FINAL_STATE


@pytest.mark.parametrize("second", ["reclock materialize", "dagster job execute"])
def test_two_runs_of_one_config_at_once_both_succeed_with_exact_outputs(
    lakes: Lakes, tmp_path: Path, second: str, connect_server: str
) -> None:
    """A real ``reclock materialize`` process and, started together with it, another one
    or a Dagster run of the job over the same windows (exports included): each succeeds,
    or fails naming the conflict; the lake equals the reference lake, which one run built.
    Both attach to the suite's Spark Connect server (their config names it), two sessions
    of one server: what races is the two processes' commits, which each makes from its
    driver. The pair on S3 (tests/storage/test_runs_s3.py) runs a JVM each."""
    config_path = write_config(tmp_path)
    config = load_config(config_path)
    config_path = attached(config_path, connect_server)
    (config.landing / "users" / "early.json").write_text(dump(EARLY))
    (config.landing / "users" / "late.json").write_text(dump(LATE))
    command = [sys.executable, "-m", "pipelines.cli", "materialize", "--config", str(config_path)]
    job = [
        str(Path(sys.executable).with_name("dagster")), "job", "execute",
        "-m", "pipelines.definitions", "-j", ALL_WINDOWS_JOB,
        "--tags", json.dumps(range_tags(KEYS[0], KEYS[-1])),
    ]
    env = {**client_env(), "PYTHONPATH": str(REPO), "RECLOCK_CONFIG": str(config_path)}
    runs = [
        subprocess.Popen(other, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for other in (command, command if second == "reclock materialize" else job)
    ]
    outputs = [run.communicate(timeout=600)[0].decode(errors="replace") for run in runs]

    codes = [run.returncode for run in runs]
    assert 0 in codes, outputs
    for code, output in zip(codes, outputs, strict=True):
        assert code == 0 or "ExportConflict" in output, output[-3000:]
    assert state(config) == FINAL_STATE
    for table in ("remap", "reclocked", "changes", "errors"):
        assert consolidated(config, table) == consolidated(lakes.reference, table), table
    assert history(config) == history(lakes.reference), "each version once"
    exported = sorted(p.name for p in (config.lake / "users" / "cdcv2").iterdir())
    assert exported == KEYS, "one folder per window, no staging left behind"
