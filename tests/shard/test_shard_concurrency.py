"""Real OS processes against one shard: racing compare-and-append, and a writer killed
between staging and committing."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

from deltalake import DeltaTable

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import ProgressStatement, Shard
from tests.shard.shard_workers import CRASH_BATCH, KV, ROUND_WIDTH, WORKERS, race_rows

WORKER_SCRIPT = str(Path(__file__).with_name("shard_workers.py"))
ROUNDS = 10
UPDATE_DDL = "k string, v long, time long, diff long"


def table_rows(path: str) -> list[tuple]:
    return sorted(tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist())


def data_files(path: str) -> set[str]:
    return {str(p.relative_to(path)) for p in Path(path, "data").rglob("*") if p.is_file()}


def spawn(*arguments: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER_SCRIPT, *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_racing_processes_each_round_exactly_one_wins(spark, tmp_path):
    table = str(tmp_path / "raced")
    shard = Shard.open(spark, table, KV)
    for worker in WORKERS:  # the Spark half, done up front so the workers need no Spark
        batches = [
            shard.stage(spark.createDataFrame(race_rows(worker, r), UPDATE_DDL))
            for r in range(ROUNDS)
        ]
        (tmp_path / f"{worker}.pickle").write_bytes(pickle.dumps(batches))
    barrier = tmp_path / "barrier"
    barrier.mkdir()

    processes = {
        w: spawn("race", table, w, str(tmp_path / f"{w}.pickle"), str(barrier)) for w in WORKERS
    }
    reports = {}
    for worker, process in processes.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        reports[worker] = [json.loads(line) for line in out.splitlines()]

    winners = []
    for r in range(ROUNDS):
        outcomes = {w: reports[w][r] for w in WORKERS}
        won = [w for w, o in outcomes.items() if o["won"]]
        assert len(won) == 1, f"round {r}: {outcomes}"
        loser = next(w for w in WORKERS if w not in won)
        assert outcomes[loser]["actual"] == ROUND_WIDTH * (r + 1)  # the loser learns the upper
        winners.append(won[0])

    shard.refresh()
    assert shard.upper == TimeFrontier.at(ROUND_WIDTH * ROUNDS)
    expected = sorted(row for r, w in enumerate(winners) for row in race_rows(w, r))
    assert table_rows(table) == expected
    assert [(p.lower.time, p.upper.time) for p in shard.progress()] == [
        (ROUND_WIDTH * r, ROUND_WIDTH * (r + 1)) for r in range(ROUNDS)
    ]
    # Losers removed their staged files: the folder holds exactly the committed files.
    committed = {str(Path(uri).relative_to(table)) for uri in DeltaTable(table).file_uris()}
    assert data_files(table) == committed


def test_a_writer_killed_before_committing_changes_nothing_and_gc_removes_its_files(
    spark, tmp_path
):
    table = str(tmp_path / "crashed")
    shard = Shard.open(spark, table, KV)
    first = [("before", 1, 1, 1)]
    shard.compare_and_append(spark.createDataFrame(first, UPDATE_DDL), *_window(0, 5))
    before = (shard.version, shard.upper, shard.since, table_rows(table), data_files(table))

    ready = tmp_path / "staged.json"
    worker = spawn("stage-then-hang", table, str(ready))
    deadline = time.monotonic() + 300
    while not ready.exists():
        assert worker.poll() is None, worker.communicate()[1]
        assert time.monotonic() < deadline, "the worker never staged its batch"
        time.sleep(0.2)
    orphans = set(json.loads(ready.read_text()))
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(timeout=60)
    assert orphans and orphans <= data_files(table)  # the files were really written

    shard.refresh()
    after = (shard.version, shard.upper, shard.since, table_rows(table))
    assert after == before[:4]

    # A re-run of the same window succeeds and writes the batch exactly once.
    rerun = spark.createDataFrame(CRASH_BATCH, UPDATE_DDL)
    assert shard.compare_and_append(rerun, *_window(5, 10)) is None
    assert table_rows(table) == sorted(first + CRASH_BATCH)
    assert shard.progress()[-1] == ProgressStatement(
        TimeFrontier.at(5), TimeFrontier.at(10), tuple((t, 4) for t in range(5, 10)), 2
    )

    removed = set(shard.gc(retention_hours=0))
    assert orphans <= removed
    assert not data_files(table) & orphans
    assert table_rows(table) == sorted(first + CRASH_BATCH)


def _window(lower: int, upper: int) -> tuple[TimeFrontier, TimeFrontier]:
    return TimeFrontier.at(lower), TimeFrontier.at(upper)
