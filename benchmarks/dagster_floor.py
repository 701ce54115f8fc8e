"""What a fresh run process costs before any Spark work: Dagster's floor under one window.

A fresh process imports what a reclock run imports (Dagster, the Spark Connect client,
reclock's definitions) and runs, on an ephemeral instance, a Dagster job of the shape of
one window of one source: one partitioned multi-asset (the step of every source) of six
tables, eight checks and an export, its body doing nothing. No scheduled window
launched as a Dagster run can cost less than this, however fast its Spark work is:

    python -m benchmarks.dagster_floor [--repeat 5]

Reports the median wall of the whole process, of its start and imports, and of its run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyspark.sql.connect.session  # noqa: F401  (the client a run attaches with)

import pipelines.cli  # noqa: F401  (reclock's definitions, as a run imports them)
from benchmarks.open_ended import timed_command

TABLES = ("remap", "reclocked", "changes", "errors", "state", "history")
CHECKS = 8
PARTITION = "2026-12-01-11:00"


def child(out: Path) -> None:
    """One process's run of the no-op job (its imports done, at module level); when the
    run began and how long it took, written to ``out``."""
    imported = time.time()
    minutes = dg.TimeWindowPartitionsDefinition(
        start="2026-01-01-00:00", cron_schedule="* * * * *", fmt="%Y-%m-%d-%H:%M"
    )
    keys = [dg.AssetKey(["users", table]) for table in TABLES]
    names = [f"check_{index}" for index in range(CHECKS)]

    export = dg.AssetSpec(dg.AssetKey(["users", "changes_cdcv2"]), deps=[keys[2]])
    check_specs = [dg.AssetCheckSpec(n, asset=keys[i % len(keys)]) for i, n in enumerate(names)]

    @dg.multi_asset(
        specs=[*(dg.AssetSpec(key) for key in keys), export], check_specs=check_specs,
        partitions_def=minutes, can_subset=True,
    )  # fmt: skip
    def sources() -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        for key in keys:
            yield dg.MaterializeResult(asset_key=key, metadata={"rows": 1})
        for index, name in enumerate(names):
            yield dg.AssetCheckResult(
                check_name=name, asset_key=keys[index % len(keys)], passed=True
            )
        yield dg.MaterializeResult(asset_key=export.key)

    defs = dg.Definitions(
        assets=[sources], jobs=[dg.define_asset_job("window", selection=dg.AssetSelection.all())]
    )
    result = defs.resolve_job_def("window").execute_in_process(
        instance=dg.DagsterInstance.ephemeral(), partition_key=PARTITION
    )
    out.write_text(json.dumps({
        "imported": imported, "run": time.time() - imported, "success": result.success,
    }))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes (medians)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    walls, imports, runs = [], [], []
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "times.json"
        for _ in range(args.repeat):
            run = timed_command([sys.executable, "-m", "benchmarks.dagster_floor",
                                 "--child", str(out)])  # fmt: skip
            times = json.loads(out.read_text()) if out.exists() else {}
            if run.returncode or not times.get("success"):
                sys.exit(f"the no-op run failed (exit {run.returncode}):\n{run.output[-3000:]}")
            walls.append(run.wall)
            imports.append(times["imported"] - run.spawned)
            runs.append(times["run"])
    print(f"a fresh no-op window run, median of {args.repeat}: {statistics.median(walls):.2f} s "
          f"wall (start and imports {statistics.median(imports):.2f} s, the Dagster run "
          f"{statistics.median(runs):.2f} s; the rest is the process's exit)")


if __name__ == "__main__":
    main()
