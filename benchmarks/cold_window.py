"""What one scheduled window costs from a cold start, phase by phase.

A fresh ``reclock materialize --through <the window's end>`` process, as a schedule or a
sensor launches each minute: interpreter and imports, the JVM and Spark session, Dagster's
run, every engine phase, the checks and the CDCv2 export, for one window of about a
hundred records of an open-ended upsert source (``benchmarks.open_ended``'s case):

    python -m benchmarks.cold_window [--records 100] [--repeat 5]
    python -m benchmarks.cold_window --remote sc://127.0.0.1:15002   # a warm Spark Connect server

Each run is a fresh process on a fresh lake. The process times its own steps: the
engine's phase announcements (``cdc_core.phases``), the imports and the session's start
(started as the run's Spark resource starts it, or attached to the ``--remote`` server:
``reclock spark-server``); what no phase covers (Dagster's run
machinery, the lake's opening) is reported as such. The figures are medians over the
runs, with the whole command's wall and CPU time (the process and its JVM).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import yaml

from benchmarks.open_ended import timed_command, write_case

PROCESS_START = "interpreter start and imports (Dagster, pyspark, reclock)"
SESSION = "Spark session start (JVM, or attaching)"
CHECKS = "the checks, first start to last end (four at a time)"
OUTSIDE = "outside phases (Dagster run, opening tables)"
EXIT = "process exit (exit hooks, the session stopping)"


def timed_run(config_file: Path, through: str, out: Path) -> None:
    """The child: one ``materialize`` through ``through``, writing its step times to
    ``out`` (seconds per step; a phase met twice counts its total) with the moments its
    imports were done and its run ended."""
    from cdc_core.config import load_config
    from cdc_core.phases import PhaseEvent, observing
    from cdc_core.spark import get_spark
    from pipelines.cli import materialize

    imported = time.time()
    steps: dict[str, float] = defaultdict(float)
    config = load_config(config_file)
    started = time.time()
    get_spark(  # as the run's resource starts it: a one-window run starts a quick driver
        config.spark.master, config.spark.conf, [str(config.lake), str(config.landing)],
        quick_start=True,
    )
    steps[SESSION] = time.time() - started

    checking: list[float] = []  # when each check started or ended

    def record(event: PhaseEvent) -> None:
        if event.name.startswith("check "):
            checking.append(time.time())
        if event.ended:
            steps[f"{event.source}: {event.name}"] += event.seconds or 0.0

    run_began = time.time()
    with observing(record):
        succeeded = materialize(config, int(datetime.fromisoformat(through).timestamp() * 1000))
    # The checks run a few at a time: their share of the run is from the first start to
    # the last end, not the sum of their times.
    steps[CHECKS] = max(checking) - min(checking) if checking else 0.0
    announced = sum(s for name, s in steps.items() if ": " in name and ": check " not in name)
    steps[OUTSIDE] = time.time() - run_began - announced - steps[CHECKS]
    out.write_text(json.dumps(
        {"steps": steps, "imported": imported, "ended": time.time(), "succeeded": succeeded}
    ))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100, help="in the window")
    parser.add_argument("--repeat", type=int, default=5, help="runs (medians are reported)")
    parser.add_argument("--remote", help="a Spark Connect server the runs attach to")
    parser.add_argument("--child", nargs=3, metavar=("CONFIG", "THROUGH", "OUT"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.child:
        timed_run(Path(args.child[0]), args.child[1], Path(args.child[2]))
        return
    root = Path(tempfile.mkdtemp(prefix="cold-window-"))
    walls, cpus = [], []
    steps: dict[str, list[float]] = defaultdict(list)
    try:
        for index in range(args.repeat):
            workdir = root / str(index)
            workdir.mkdir()
            config_file, through, _ = write_case(workdir, 1, datetime.now(UTC), args.records)
            if args.remote:
                settings = yaml.safe_load(config_file.read_text())
                settings["spark"] = {"remote": args.remote, "conf": settings["spark"]["conf"]}
                config_file.write_text(yaml.safe_dump(settings))
            out = workdir / "steps.json"
            command = [sys.executable, "-m", "benchmarks.cold_window",
                       "--child", str(config_file), through, str(out)]  # fmt: skip
            run = timed_command(command)
            walls.append(run.wall)
            cpus.append(run.cpu)
            if run.returncode or not out.exists():
                sys.exit(f"run {index} failed (exit {run.returncode}):\n{run.output[-3000:]}")
            result = json.loads(out.read_text())
            if not result["succeeded"]:
                sys.exit(f"run {index}: the materialization failed:\n{run.output[-3000:]}")
            steps[PROCESS_START].append(result["imported"] - run.spawned)
            for name, seconds in result["steps"].items():
                steps[name].append(seconds)
            steps[EXIT].append(run.spawned + run.wall - result["ended"])
            print(f"run {index}: {walls[-1]:.1f} s wall, {cpus[-1]:.1f} s CPU", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    attached = f", attached to {args.remote}" if args.remote else ""
    print(f"\none window of {args.records} records, cold{attached}, median of {args.repeat} runs: "
          f"{statistics.median(walls):.1f} s wall, {statistics.median(cpus):.1f} s CPU "
          f"(wall of each run: {', '.join(f'{w:.1f}' for w in walls)})")  # fmt: skip
    print(f"{'step':<58} {'median s':>9} {'max s':>7}")
    for name, seconds in steps.items():
        print(f"{name:<58} {statistics.median(seconds):>9.2f} {max(seconds):>7.2f}")


if __name__ == "__main__":
    main()
