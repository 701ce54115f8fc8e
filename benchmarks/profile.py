"""Where a contender's time goes: per engine phase, Spark jobs, executor CPU and shuffle,
and the driver's time outside Spark jobs.

Wall time on a shared machine moves with the load; the executors' CPU time per phase
(from Spark's event log) does not, so changes to the engine are compared on it. A
phase's driver time is its wall time less the wall time of its Spark jobs: planning
(every DataFrame call is analysed on the JVM as it is made), commits and metadata reads.
A small window's cost is mostly there and in the jobs' fixed costs, not in its rows.

    python -m benchmarks.profile --size medium                     # RECLOCK (Dagster)
    python -m benchmarks.profile --size medium --contender reclock-per-window --stages
    python -m benchmarks.profile --records 120000 --windows 12 --contender reclock-per-window

Each Spark job is labelled with the engine phase that started it (``cdc_core.phases``);
jobs outside any phase (Dagster, the dataset's preparation) count as ``(outside phases)``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pyspark import SparkContext

from benchmarks.bench import (
    CONTENDERS,
    FLOOR_PARSE,
    add_workload_arguments,
    by_slug,
    floor_parse,
    prepare_dataset,
    workload_from,
)
from benchmarks.report_page import Report, add_page_option, bar_chart, figure, publish
from cdc_core.phases import PhaseEvent, observing
from cdc_core.spark import get_spark

OUTSIDE = "(outside phases)"


@dataclass
class StageFigures:
    name: str
    tasks: int = 0
    cpu_seconds: float = 0.0
    shuffle_written: int = 0


@dataclass
class PhaseFigures:
    jobs: int = 0
    job_seconds: float = 0.0  # wall time of the phase's Spark jobs, submission to end
    cpu_seconds: float = 0.0
    shuffle_written: int = 0
    stages: dict[int, StageFigures] = field(default_factory=dict)


@contextmanager
def labelled_phases(context: SparkContext) -> Iterator[None]:
    """Label every Spark job with the innermost engine phase running when it starts."""
    open_phases: list[str] = []

    def record(event: PhaseEvent) -> None:
        if not event.ended:
            open_phases.append(event.name)
        elif event.name in open_phases:
            open_phases.remove(event.name)
        context.setJobDescription(open_phases[-1] if open_phases else OUTSIDE)

    context.setJobDescription(OUTSIDE)
    with observing(record):
        yield


def read_event_log(folder: Path) -> dict[str, PhaseFigures]:
    """Per job description: jobs and their wall time, executor CPU seconds, shuffle bytes
    written, stages."""
    phase_of_stage: dict[int, str] = {}
    running: dict[int, tuple[str, int]] = {}  # job id -> (description, submission ms)
    phases: dict[str, PhaseFigures] = defaultdict(PhaseFigures)
    for log in sorted(folder.rglob("*")):
        if not log.is_file():
            continue
        for line in log.read_text().splitlines():
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerJobStart":
                name = (event.get("Properties") or {}).get("spark.job.description") or OUTSIDE
                phases[name].jobs += 1
                running[event["Job ID"]] = (name, event["Submission Time"])
                for stage in event["Stage IDs"]:
                    phase_of_stage[stage] = name
            elif kind == "SparkListenerJobEnd" and event["Job ID"] in running:
                name, submitted = running.pop(event["Job ID"])
                phases[name].job_seconds += (event["Completion Time"] - submitted) / 1000
            elif kind == "SparkListenerTaskEnd":
                metrics = event.get("Task Metrics") or {}
                phase = phases[phase_of_stage.get(event["Stage ID"], OUTSIDE)]
                stage = phase.stages.setdefault(event["Stage ID"], StageFigures("?"))
                cpu = metrics.get("Executor CPU Time", 0) / 1e9
                written = (metrics.get("Shuffle Write Metrics") or {}).get(
                    "Shuffle Bytes Written", 0
                )
                stage.tasks += 1
                stage.cpu_seconds += cpu
                stage.shuffle_written += written
                phase.cpu_seconds += cpu
                phase.shuffle_written += written
            elif kind == "SparkListenerStageSubmitted":
                info = event["Stage Info"]
                phase = phases[phase_of_stage.get(info["Stage ID"], OUTSIDE)]
                phase.stages.setdefault(info["Stage ID"], StageFigures("?")).name = info[
                    "Stage Name"
                ]
    return dict(phases)


def render(phases: dict[str, PhaseFigures], wall: dict[str, float], stages: bool) -> str:
    lines = [
        "| phase | wall s | jobs | job wall s | driver s | executor CPU s | shuffle MiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    # A phase that starts no Spark job (building a plan) has a wall time and no figures.
    every = {name: phases.get(name, PhaseFigures()) for name in {*phases, *wall}}
    for name, figures in sorted(
        every.items(), key=lambda item: (-item[1].cpu_seconds, -wall.get(item[0], 0.0))
    ):
        seconds = wall.get(name, 0.0)
        driver = f"{seconds - figures.job_seconds:.2f}" if name in wall else ""
        lines.append(
            f"| {name} | {seconds:.2f} | {figures.jobs} | {figures.job_seconds:.2f} | "
            f"{driver} | {figures.cpu_seconds:.2f} | {figures.shuffle_written / 2**20:.1f} |"
        )
        if stages:
            for stage_id, stage in sorted(figures.stages.items()):
                lines.append(
                    f"|   stage {stage_id}: {stage.name} ({stage.tasks} tasks) | | | | | "
                    f"{stage.cpu_seconds:.2f} | {stage.shuffle_written / 2**20:.1f} |"
                )
    jobs = sum(f.jobs for f in phases.values())
    job_seconds = sum(f.job_seconds for f in phases.values())
    cpu = sum(f.cpu_seconds for f in phases.values())
    lines.append(f"| total | | {jobs} | {job_seconds:.2f} | | {cpu:.2f} | |")
    return "\n".join(lines)


def against_floor(phases: dict[str, PhaseFigures], floor: PhaseFigures) -> str:
    """The phases' executor CPU seconds against the floor's, in a sentence."""
    reclock = sum(figures.cpu_seconds for figures in phases.values())
    return (f"executor CPU: {reclock:.2f} s; {FLOOR_PARSE} {floor.cpu_seconds:.2f} s "
            f"({reclock / floor.cpu_seconds:.1f}x)")  # fmt: skip


def page_report(
    name: str,
    headline: str,
    phases: dict[str, PhaseFigures],
    wall: dict[str, float],
    floor: PhaseFigures,
) -> Report:
    """The report page: per phase, wall seconds (its Spark jobs' share and the driver's)
    and executor CPU seconds, the floor's CPU beside them."""
    order = sorted({*phases, *wall}, key=lambda phase: -wall.get(phase, 0.0))
    drawn, (walls, cpus) = figure(rows=2, height=0.6 + 0.3 * max(len(order), 4))
    jobs = [phases.get(phase, PhaseFigures()).job_seconds for phase in order]
    driver = [max(wall.get(phase, 0.0) - jobs[i], 0.0) for i, phase in enumerate(order)]
    walls.barh(order[::-1], jobs[::-1], color="tab:blue", label="Spark jobs")
    walls.barh(order[::-1], driver[::-1], left=jobs[::-1], color="tab:orange", label="driver")
    walls.set_xlabel("wall seconds")
    walls.set_title("where the wall time goes, per engine phase")
    walls.legend(fontsize=8)
    bar_chart(cpus, {**{phase: phases.get(phase, PhaseFigures()).cpu_seconds for phase in order},
                     FLOOR_PARSE: floor.cpu_seconds},
              "executor CPU seconds", "executor CPU per phase, and the floor's")  # fmt: skip
    body = "\n\n".join([headline + ".", render(phases, wall, False),
                         against_floor(phases, floor) + "."])  # fmt: skip
    return Report(f"profile-{name}", "Where the time goes", body, {"phases": drawn})


def arguments() -> argparse.ArgumentParser:
    """The command's options (its workload and contender)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_workload_arguments(parser)
    parser.add_argument("--contender", choices=by_slug(), default="reclock-dagster")
    parser.add_argument("--workdir", type=Path, default=Path("bench-out"))
    parser.add_argument("--stages", action="store_true", help="list every stage too")
    add_page_option(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = arguments().parse_args(argv)
    events = Path(tempfile.mkdtemp(prefix="reclock-events-"))
    spark = get_spark(
        conf={
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": str(events),
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        }
    )
    workload = workload_from(args)
    dataset = prepare_dataset(spark, workload, args.workdir)
    scratch = Path(args.workdir).absolute() / "scratch" / "profile"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    wall: dict[str, float] = defaultdict(float)
    started: dict[str, float] = {}

    def timed(event: PhaseEvent) -> None:
        if not event.ended:
            started[event.name] = time.perf_counter()
        else:
            wall[event.name] += time.perf_counter() - started.pop(event.name, time.perf_counter())

    began = time.perf_counter()
    with observing(timed), labelled_phases(spark.sparkContext):
        CONTENDERS[by_slug()[args.contender]](spark, dataset, scratch)
    seconds = time.perf_counter() - began
    # The floor, measured the same way: CPU ratios hold on a loaded machine.
    floor_parse(spark, dataset, scratch)  # warm-up, unlabelled
    spark.sparkContext.setJobDescription(FLOOR_PARSE)
    floor_parse(spark, dataset, scratch)
    spark.stop()
    headline = f"{by_slug()[args.contender]} on {workload.name}: {seconds:.2f} s wall"
    print(headline)
    phases = read_event_log(events)
    floor = phases.pop(FLOOR_PARSE)
    print(render(phases, wall, args.stages))
    print(f"\n{against_floor(phases, floor)}")
    publish(args.page, "benchmarks.profile", argv, page_report(
        f"{args.contender}-{workload.name}", headline, phases, wall, floor))  # fmt: skip
    shutil.rmtree(events, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
