"""The profile's reading of Spark's event log: per phase, its jobs and their wall time, its
executor CPU, and the driver's time as what the jobs leave of the phase's wall time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.profile import OUTSIDE, PhaseFigures, read_event_log, render


def _events(folder: Path, events: list[dict]) -> Path:
    folder.mkdir()
    (folder / "app-1").write_text("\n".join(json.dumps(event) for event in events))
    return folder


def _job(job: int, phase: str | None, stages: list[int], submitted: int, done: int) -> list[dict]:
    properties = {"spark.job.description": phase} if phase else {}
    return [
        {"Event": "SparkListenerJobStart", "Job ID": job, "Submission Time": submitted,
         "Stage IDs": stages, "Properties": properties},
        {"Event": "SparkListenerJobEnd", "Job ID": job, "Completion Time": done},
    ]  # fmt: skip


def _task(stage: int, cpu_ns: int, shuffle: int = 0) -> dict:
    written = {"Shuffle Bytes Written": shuffle}
    metrics = {"Executor CPU Time": cpu_ns, "Shuffle Write Metrics": written}
    return {"Event": "SparkListenerTaskEnd", "Stage ID": stage, "Task Metrics": metrics}


def test_jobs_their_wall_time_and_cpu_go_to_the_phase_that_started_them(tmp_path: Path) -> None:
    log = _events(
        tmp_path / "events",
        _job(0, "bind windows", [0, 1], 1_000, 1_400)
        + _job(1, "bind windows", [2], 2_000, 2_250)
        + _job(2, None, [3], 5_000, 5_100)
        + [_task(0, 300_000_000, 2**20), _task(1, 100_000_000), _task(2, 50_000_000),
           _task(3, 10_000_000)],  # fmt: skip
    )
    phases = read_event_log(log)
    assert phases["bind windows"].jobs == 2
    assert phases["bind windows"].job_seconds == pytest.approx(0.65)
    assert phases["bind windows"].cpu_seconds == pytest.approx(0.45)
    assert phases["bind windows"].shuffle_written == 2**20
    assert phases[OUTSIDE].jobs == 1 and phases[OUTSIDE].job_seconds == pytest.approx(0.1)


def test_a_job_that_never_ended_adds_no_wall_time(tmp_path: Path) -> None:
    started_only = _job(0, "publish state", [0], 1_000, 9_000)[:1]
    phases = read_event_log(_events(tmp_path / "events", started_only))
    assert phases["publish state"].jobs == 1 and phases["publish state"].job_seconds == 0


def test_driver_time_is_the_phase_wall_time_left_by_its_jobs() -> None:
    phases = {"bind": PhaseFigures(jobs=2, job_seconds=0.65)}  # planning starts no job
    table = render(phases, {"bind": 2.0, "plan envelope": 0.9}, stages=False)
    assert "| bind | 2.00 | 2 | 0.65 | 1.35 |" in table
    assert "| plan envelope | 0.90 | 0 | 0.00 | 0.90 |" in table
