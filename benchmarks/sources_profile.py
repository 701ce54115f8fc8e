"""Where one scheduled window of N sources goes, per engine phase and check.

    python -m benchmarks.sources_profile [--sources 8] [--variant upsert]
                                         [--workdir bench-out/sources-profile]

Builds the ``benchmarks.sources`` case (N topics, 10 windows of dumps run through in a
process of their own), lands one more window and materializes it in this process, as
``reclock materialize --through`` would (checks and CDCv2 export included), with every
Spark job labelled by the phase that started it. Prints per phase how many times it ran,
its wall seconds summed over the sources (sources are served side by side, so these
overlap), its Spark jobs and their seconds, and when it first started and last ended
(seconds into the window); then the window's wall seconds, Spark jobs and Delta commits.
Phases of one source are summed over the sources; what a run does once for all sources
shows under its own phase name.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchmarks.age import cli
from benchmarks.age_instance import MINUTE_MS
from benchmarks.profile import labelled_phases, read_event_log
from benchmarks.sources import EVENT_LOG, FIRST_WINDOWS, VARIANTS, Case, delta_commits, iso
from cdc_core.config import load_config
from cdc_core.phases import PhaseEvent, observing
from cdc_core.spark import get_spark
from pipelines.run import materialize


def main(argv: list[str] | None = None) -> None:
    """Build the case, profile its next window, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--variant", choices=VARIANTS, default="upsert")
    parser.add_argument("--workdir", type=Path, default=Path("bench-out") / "sources-profile")
    args = parser.parse_args(argv)
    case = Case(args.workdir.absolute() / f"{args.variant}-{args.sources}", args.variant,
                args.sources, FIRST_WINDOWS + 2)  # fmt: skip
    case.land(FIRST_WINDOWS)
    config_file = case.config("own", None)
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "SPARK_REMOTE")}
    through = iso(case.start_ms + FIRST_WINDOWS * MINUTE_MS)
    subprocess.run(cli("materialize", "--config", str(config_file), "--through", through),
                   check=True, env=env, stdout=subprocess.DEVNULL)  # fmt: skip
    case.land(1)
    events = Path(tempfile.mkdtemp(prefix="reclock-events-"))
    # A scheduled window's run starts its driver quick (C1 alone), as ``reclock
    # materialize`` of one window does.
    spark = get_spark("local[2]", {**EVENT_LOG, "spark.eventLog.dir": str(events)},
                      quick_start=True)  # fmt: skip
    wall: dict[str, float] = defaultdict(float)
    runs: dict[str, int] = defaultdict(int)
    spans: dict[str, list[float]] = {}  # first start, last end, from the window's start

    def timed(event: PhaseEvent) -> None:
        moment = time.perf_counter() - began
        span = spans.setdefault(event.name, [moment, moment])
        span[1] = max(span[1], moment)
        if event.ended and event.seconds is not None:
            wall[event.name] += event.seconds
            runs[event.name] += 1

    commits = delta_commits(case.lake)
    began = time.perf_counter()
    with observing(timed), labelled_phases(spark.sparkContext):
        materialize(load_config(config_file), case.start_ms + (FIRST_WINDOWS + 1) * MINUTE_MS)
    seconds = time.perf_counter() - began
    commits = delta_commits(case.lake) - commits
    spark.stop()
    phases = read_event_log(events)
    jobs = sum(p.jobs for p in phases.values())
    print(f"{args.variant}, {args.sources} source(s), one window: {seconds:.1f} s wall, "
          f"{jobs} Spark jobs, {commits} Delta commits")  # fmt: skip
    print(f"{'phase':32} {'runs':>5} {'wall s':>8} {'jobs':>5} {'job s':>8} {'from s':>7} "
          f"{'to s':>7}")  # fmt: skip
    for name in sorted(set(phases) | set(wall), key=lambda n: -wall.get(n, 0.0)):
        labelled = phases.get(name)
        first, last = spans.get(name, [0.0, 0.0])
        print(f"{name:32} {runs.get(name, 0):5} {wall.get(name, 0.0):8.2f} "
              f"{labelled.jobs if labelled else 0:5} "
              f"{labelled.job_seconds if labelled else 0.0:8.2f} "
              f"{first:7.1f} {last:7.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
