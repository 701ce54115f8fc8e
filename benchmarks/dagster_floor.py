"""What a fresh run process costs before any Spark work: Dagster's floor under one window.

A fresh process imports what a reclock run imports (Dagster, the Spark Connect client,
reclock's definitions) and runs, on an ephemeral instance, a Dagster job of the shape of
one window of N sources: partitioned multi-assets of ``SOURCES_PER_STEP`` sources each
(reclock's steps), each source with six tables (each downstream of the one it is built
from), nine checks and an export, the bodies doing nothing but report. No scheduled
window launched as a Dagster run can cost less than this, however fast its Spark work is:

    python -m benchmarks.dagster_floor [--repeat 5] [--sources 200] [--per-step 16]
        [--checks 9] [--windows 60]

With ``--windows`` W > 1 the run covers W windows, as a backfill does: one
materialization per table and window, each check reported once for the range, by
reclock's own ``CheckReports`` (the evaluation itself, since Dagster would list every
partition of the asset to find the materialization judged).

Reports the median wall of the whole process, of its start and imports, and of its run.
"""


import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import dagster as dg
import pyspark.sql.connect.session  # noqa: F401  (the client a run attaches with)
from dagster import AssetExecutionContext

import pipelines.cli  # noqa: F401  (reclock's definitions, as a run imports them)
from assets.checks import CheckReports
from assets.deployment import SOURCES_PER_STEP
from assets.partitions import range_tags
from benchmarks.open_ended import timed_command

Reported = dg.MaterializeResult | dg.AssetCheckResult | dg.AssetCheckEvaluation | dg.Output

# Each table and the table it is built from, as reclock's sources have them.
TABLES = (("remap", None), ("reclocked", "remap"), ("changes", "reclocked"),
          ("errors", "reclocked"), ("state", "changes"), ("history", "changes"))  # fmt: skip
KEY_FORMAT, FIRST_PARTITION = "%Y-%m-%d-%H:%M", "2026-12-01-11:00"


def child(out: Path, sources: int, per_step: int, checks: int, windows: int) -> None:
    """One process's run of the no-op job (its imports done, at module level) over
    ``windows`` windows; when the run began and how long it took, written to ``out``."""
    imported = time.time()
    minutes = dg.TimeWindowPartitionsDefinition(
        start="2026-01-01-00:00", cron_schedule="* * * * *", fmt=KEY_FORMAT
    )
    names = [f"source_{index:03d}" for index in range(sources)]
    steps = [step_of(names[i : i + per_step], minutes, checks)
             for i in range(0, sources, per_step)]  # fmt: skip
    defs = dg.Definitions(
        assets=steps, jobs=[dg.define_asset_job("window", selection=dg.AssetSelection.all())]
    )
    last = datetime.strptime(FIRST_PARTITION, KEY_FORMAT) + timedelta(minutes=windows - 1)
    result = defs.resolve_job_def("window").execute_in_process(
        instance=dg.DagsterInstance.ephemeral(),
        partition_key=None if windows > 1 else FIRST_PARTITION,
        tags=range_tags(FIRST_PARTITION, last.strftime(KEY_FORMAT)) if windows > 1 else None,
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
    )  # fmt: skip
    out.write_text(json.dumps({
        "imported": imported, "run": time.time() - imported, "success": result.success,
    }))  # fmt: skip


def step_of(
    names: list[str], partitions: dg.PartitionsDefinition, checks: int
) -> dg.AssetsDefinition:
    """One step's multi-asset of the sources ``names``, reporting every table, check and
    export of each (a check as reclock's steps report it, ``CheckReports``)."""
    reports = CheckReports()
    tables = {name: [dg.AssetKey([name, table]) for table, _ in TABLES] for name in names}
    specs = [
        dg.AssetSpec(dg.AssetKey([name, table]),
                     deps=[dg.AssetKey([name, upstream])] if upstream else [])
        for name in names for table, upstream in TABLES
    ] + [dg.AssetSpec(dg.AssetKey([name, "changes_cdcv2"]), deps=[dg.AssetKey([name, "changes"])])
         for name in names]  # fmt: skip
    judged = [(f"check_{index}", index % len(TABLES)) for index in range(checks)]
    check_specs = [dg.AssetCheckSpec(check, asset=tables[name][table])
                   for name in names for check, table in judged]  # fmt: skip

    @dg.multi_asset(name=f"sources_{names[0]}", specs=specs, check_specs=check_specs,
                    partitions_def=partitions, can_subset=True)  # fmt: skip
    def step(context: AssetExecutionContext) -> Iterator[Reported]:
        for name in names:
            for key in tables[name]:
                yield dg.MaterializeResult(asset_key=key, metadata={"rows": 1})
            for check, table in judged:
                yield from reports.report(context, dg.AssetCheckResult(
                    check_name=check, asset_key=tables[name][table], passed=True))  # fmt: skip
            yield dg.MaterializeResult(asset_key=dg.AssetKey([name, "changes_cdcv2"]))

    return reports.of(step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes (medians)")
    parser.add_argument("--sources", type=int, default=1)
    parser.add_argument("--per-step", type=int, default=SOURCES_PER_STEP)
    parser.add_argument("--checks", type=int, default=9, help="checks per source")
    parser.add_argument("--windows", type=int, default=1, help="windows the run covers")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.sources, args.per_step, args.checks, args.windows)
        return
    shape = ["--sources", str(args.sources), "--per-step", str(args.per_step),
             "--checks", str(args.checks), "--windows", str(args.windows)]  # fmt: skip
    walls, imports, runs = [], [], []
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "times.json"
        for _ in range(args.repeat):
            run = timed_command([sys.executable, "-m", "benchmarks.dagster_floor",
                                 "--child", str(out), *shape])  # fmt: skip
            times = json.loads(out.read_text()) if out.exists() else {}
            if run.returncode or not times.get("success"):
                sys.exit(f"the no-op run failed (exit {run.returncode}):\n{run.output[-3000:]}")
            walls.append(run.wall)
            imports.append(times["imported"] - run.spawned)
            runs.append(times["run"])
    print(f"a fresh no-op run of {args.windows} window(s) of {args.sources} source(s) in "
          f"steps of {args.per_step}, median of {args.repeat}: {statistics.median(walls):.2f} s "
          f"wall (start and imports {statistics.median(imports):.2f} s, the Dagster run "
          f"{statistics.median(runs):.2f} s; the rest is the process's exit)")


if __name__ == "__main__":
    main()
