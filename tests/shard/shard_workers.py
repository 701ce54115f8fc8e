"""Worker processes for the shard race and crash tests (run as scripts, one per process).

race   TABLE NAME STAGED_PICKLE BARRIER_DIR
    For each pre-staged batch (round r), meet the other worker at a file barrier, then
    commit the batch with expected upper [10 r] and new upper [10 r + 10]. Prints one JSON
    line per round: {"round", "won", "actual"}. Only the commit half runs here: it is
    driver-only, so these workers start no Spark.

stage-then-hang   TABLE READY_FILE
    Stage one batch with Spark (the real first half of compare_and_append), announce the
    staged files in READY_FILE, then wait to be killed before committing.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from pathlib import Path

from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import Shard

KV = StructType([StructField("k", StringType()), StructField("v", LongType())])
ROUND_WIDTH = 10
WORKERS = ("left", "right")
CRASH_BATCH = [(f"crash-{i}", i, 5 + i % 5, 1) for i in range(20)]  # times in [5, 10)


def race_rows(worker: str, round_: int) -> list[tuple[str, int, int, int]]:
    """The updates ``worker`` offers in ``round_``: distinct per worker and round."""
    return [(f"{worker}-{round_}-{i}", i, ROUND_WIDTH * round_ + i, 1) for i in range(3)]


def _await_barrier(barrier: Path, round_: int, worker: str) -> None:
    (barrier / f"{round_}.{worker}").touch()
    while not all((barrier / f"{round_}.{w}").exists() for w in WORKERS):
        time.sleep(0.005)


def race(table: str, worker: str, staged_pickle: str, barrier_dir: str) -> None:
    staged_batches = pickle.loads(Path(staged_pickle).read_bytes())
    # No Spark in this process: the commit half of the protocol never touches it.
    shard = Shard.open(None, table, KV)  # type: ignore[arg-type]
    for round_, staged in enumerate(staged_batches):
        shard.refresh()  # both workers now hold the same version: their commits collide
        _await_barrier(Path(barrier_dir), round_, worker)
        expected = TimeFrontier.at(ROUND_WIDTH * round_)
        outcome = shard.commit(staged, expected, TimeFrontier.at(ROUND_WIDTH * (round_ + 1)))
        actual = None if outcome is None else outcome.actual.time
        print(json.dumps({"round": round_, "won": outcome is None, "actual": actual}), flush=True)


def stage_then_hang(table: str, ready_file: str) -> None:
    from cdc_core.spark import get_spark

    spark = get_spark(
        "local[1]", {"spark.driver.memory": "1g", "spark.sql.shuffle.partitions": "1"}
    )
    shard = Shard.open(spark, table, KV)
    staged = shard.stage(
        spark.createDataFrame(CRASH_BATCH, "k string, v long, time long, diff long")
    )
    announcement = Path(ready_file + ".tmp")
    announcement.write_text(json.dumps([f.path for f in staged.files]))
    os.replace(announcement, ready_file)
    time.sleep(600)  # the test kills this process here, between staging and committing


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    {"race": race, "stage-then-hang": stage_then_hang}[command](*arguments)
