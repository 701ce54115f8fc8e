"""Each fault of a store that misbehaves, at each phase of a run that touches the store.

    PYTHONPATH=. .venv/bin/python -m tests.storage.fault_matrix [--faults F ...] [--phases P ...]

Too long for the suite (seven faults at ten phases, a run of a deployment and its
maintenance each, some of them minutes long), so it runs on its own, and exits non-zero
when any case breaks a promise. Every case runs the reliability tests' config (one
source, four windows, its history and CDCv2 export) on a fresh bucket of moto's S3
server behind the fault chain of ``tests/storage/faults.py`` (toxiproxy, then the HTTP
fault proxy), in this process: ``materialize`` (the Dagster run, with its checks and its
export), then ``maintain`` (retire, each table within its bounds, the registry folded).

The fault starts when the run first enters the phase (a ``cdc_core.phases`` observer),
and lasts until the run ends; ``down 30 s`` heals itself after 30 s. What each case must
give (``_judge``):

- the run completes, and its tables equal a run that never saw a fault, row for row with
  each row's time (so every read as of a time is the same); or
- it fails with the named storage error, within the policy's deadline of the fault;
  every shard then holds exactly the clean run's rows below its upper (nothing partial
  visible); and a re-run on the healed store ends equal to the clean run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import boto3
import yaml

from cdc_core.app.upkeep import maintain_sources
from cdc_core.config import Config, load_config
from cdc_core.phases import PhaseEvent, observing
from cdc_core.shard import existing_table
from cdc_core.shard.handle import SINCE, UPPER
from cdc_core.shard.log import read_frontier
from cdc_core.source import maintenance
from cdc_core.storage import StorageFailure
from pipelines.run import materialize
from tests.storage.conftest import KEYS, FaultyStore
from tests.storage.faults import fault_proxy, free_port, toxiproxy, wait_for_port
from tests.storage.test_runs_s3 import TABLES, s3_config, table_rows

# One policy for every case: tries enough to ride out a 503 burst of two, a deadline a
# case can wait for (the config's load checks it against the tries' longest course).
POLICY = {"attempts": 3, "base_backoff": "100ms", "max_backoff": "2s",
          "request_timeout": "5s", "deadline": "1m"}  # fmt: skip
DEADLINE_S = 60
# What a failed run may take beyond the deadline to wind down and report.
WIND_DOWN_S = 30
NAMED = "failed at the object store (s3://"
PHASES = ("register dumps", "bind windows", "append reclocked", "append changes",
          "append errors", "publish state", "export CDCv2", "retire dumps",
          "maintain tables", "maintain registry")  # fmt: skip
SHARDS = ("remap", "reclocked", "changes", "errors")


# The store coming back by itself after ``down 30 s`` (cancelled when a case heals it).
_COMING_BACK: list[threading.Timer] = []


def _down_for(seconds: float) -> Callable[[FaultyStore], None]:
    def fault(store: FaultyStore) -> None:
        store.tcp.down()
        _COMING_BACK.append(threading.Timer(seconds, store.tcp.up))
        _COMING_BACK[-1].start()

    return fault


def _bandwidth(store: FaultyStore) -> None:
    store.tcp.add("slow replies", "bandwidth", rate=64)  # KiB/s, each way
    store.tcp.add("slow requests", "bandwidth@upstream", rate=64)


# Which fault comes from where: toxiproxy (TCP) for latency, bandwidth and the store
# down; the HTTP fault proxy for 503 bursts, cut listings and the reset upload (it picks
# the upload, which needs HTTP). Each lasts while its phase runs, but the store down: for
# 30 s, or until the run has failed.
FAULTS: dict[str, Callable[[FaultyStore], None]] = {
    "latency 200 ms": lambda store: store.tcp.add("latency", "latency", latency=200),
    "64 KiB/s": _bandwidth,
    "reset upload": lambda store: store.http.reset_uploads(1),
    "503 bursts": lambda store: store.http.schedule(burst_every=10),
    "cut listings": lambda store: store.http.truncate(1_000_000),
    "down 30 s": _down_for(30),
    "down for good": lambda store: store.tcp.down(),
}
LASTING = ("down 30 s", "down for good")


def _heal(store: FaultyStore) -> None:
    while _COMING_BACK:
        _COMING_BACK.pop().cancel()
    store.tcp.up()
    store.http.slow_down(0)
    store.http.truncate(0)
    store.http.schedule()
    store.http.reset_uploads(0)


@dataclass
class Outcome:
    """One case: whether its fault started, how its run ended, and what was wrong."""

    fault: str
    phase: str
    armed: bool = False
    completed: bool = False
    fired: str = ""  # what the HTTP fault proxy did, where it counts its faults
    seconds_to_failure: float | None = None
    broken: tuple[str, ...] = ()

    def row(self) -> str:
        if not self.armed:
            ended = "phase not reached"
        elif self.completed:
            ended = "completed"
        else:
            ended = f"failed named after {self.seconds_to_failure:.0f} s, re-run exact"
        verdict = "ok" if not self.broken else "BROKEN: " + "; ".join(self.broken)
        return f"| {self.fault} | {self.phase} | {self.fired} | {ended} | {verdict} |"


class Steps:
    """A deployment's run and its maintenance, on a fresh bucket of the chain's store."""

    def __init__(self, store: FaultyStore, now_ms: int) -> None:
        self.store = store
        self.now_ms = now_ms
        bucket = f"m{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=store.direct).create_bucket(Bucket=bucket)
        self.workdir = Path(tempfile.mkdtemp(prefix="fault-matrix-"))
        path = s3_config(f"s3://{bucket}", self.workdir)
        data = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump({**data, "storage": {"retries": POLICY}}))
        self.config: Config = load_config(path)

    def run(self, between: Callable[[], object] = lambda: None) -> tuple[bool, str]:
        """Materialize every window, then (``between`` called first) maintain: whether
        both completed, and what they said (a failure of the store as its one line)."""
        said = io.StringIO()
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            if not materialize(self.config):
                return False, said.getvalue()
            between()
            try:
                list(maintain_sources(self.config, None, self.now_ms))
            except StorageFailure as failure:
                return False, str(failure)
        return True, said.getvalue()

    def rows(self) -> dict[str, Counter]:
        return {table: table_rows(self.config, table) for table in (*TABLES, "state")}


def _judge(store: FaultyStore, fault: str, at: str, clean: dict[str, Counter],
           unmaintained: dict[str, Counter], now_ms: int) -> Outcome:  # fmt: skip
    outcome = Outcome(fault, at)
    steps = Steps(store, now_ms)
    armed_at: list[float] = []

    def arm(event: PhaseEvent) -> None:
        if event.name != at or (event.ended and len(armed_at) != 1):
            return
        if not event.ended and not armed_at:
            armed_at.append(time.monotonic())
            FAULTS[fault](store)
        elif event.ended and fault not in LASTING:
            armed_at.append(time.monotonic())
            _heal(store)

    store.http.clear()
    with observing(arm):
        completed, said = steps.run()
    ended = time.monotonic()
    counts = store.http.counts()
    outcome.fired = ", ".join(f"{counts[kind]} {kind}" for kind in ("503 SlowDown", "reset upload")
                              if counts.get(kind))  # fmt: skip
    _heal(store)
    outcome.armed = bool(armed_at)
    broken: list[str] = []
    if completed:
        outcome.completed = True
    else:
        outcome.seconds_to_failure = ended - armed_at[0] if armed_at else None
        if NAMED not in said:
            kept = steps.workdir / "run-output.txt"
            kept.write_text(said)
            broken.append(f"not named (its output: {kept}): {said[-400:]!r}")
        took = outcome.seconds_to_failure or 0.0
        if took > DEADLINE_S + WIND_DOWN_S:
            broken.append(f"failed {took:.0f} s after the fault")
        broken += _partial(steps, unmaintained)
        time.sleep(1)  # a timer healing the store may still be due
        _heal(store)
        again, said = steps.run()
        if not again:
            broken.append(f"the re-run failed: {said[-400:]!r}")
    if not broken:
        rows = steps.rows()
        broken += [f"{table} differs" for table in rows if rows[table] != clean[table]]
    outcome.broken = tuple(broken)
    return outcome


def _partial(steps: Steps, clean: dict[str, Counter]) -> list[str]:
    """What a failed run left visible that the clean run does not hold: each shard read
    as of each time from its since (a maintenance compacts below it) to its upper must
    be the clean run's read as of that time (``clean``: before any maintenance)."""
    wrong = []
    for table in SHARDS:
        path = str(steps.config.lake / "users" / table)
        stored = existing_table(path)
        if stored is None:
            continue
        since = read_frontier(stored, SINCE).time or 0
        upper = read_frontier(stored, UPPER).time
        rows = table_rows(steps.config, table)
        times = {dict(row)["time"] for row in (*rows, *clean[table])}
        for time_ in sorted(t for t in times if since <= t and (upper is None or t < upper)):
            if _as_of(rows, time_) != _as_of(clean[table], time_):
                wrong.append(f"{table} as of {time_} (since {since}, upper {upper}) differs")
                break
    return wrong


def _as_of(rows: Counter, time_: int) -> Counter:
    """A table's contents as of ``time_``: the rows at or before it, consolidated."""
    held: Counter = Counter()
    for row, diff in rows.items():
        fields = dict(row)
        if fields.pop("time") <= time_:
            held[tuple(sorted(fields.items()))] += diff
    return Counter({row: diff for row, diff in held.items() if diff})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", nargs="*", default=list(FAULTS), choices=list(FAULTS))
    parser.add_argument("--phases", nargs="*", default=list(PHASES), choices=list(PHASES))
    args = parser.parse_args(argv)
    # A registry this small is folded by every maintenance, so the fold meets each fault.
    maintenance.SMALL_FILES = 1
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                               str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    outcomes = []
    try:
        wait_for_port(port, server, "the S3 server")
        with fault_proxy(port) as http, toxiproxy(http.port) as tcp:
            store = FaultyStore(f"http://127.0.0.1:{tcp.port}", f"http://127.0.0.1:{port}",
                                tcp, http)  # fmt: skip
            os.environ.update(KEYS, AWS_ENDPOINT_URL=store.endpoint)
            now_ms = int(time.time() * 1000)
            clean_steps = Steps(store, now_ms)
            began = time.monotonic()
            unmaintained: dict[str, Counter] = {}
            assert clean_steps.run(lambda: unmaintained.update(clean_steps.rows()))[0]
            print(f"clean run: {time.monotonic() - began:.0f} s", flush=True)
            clean = clean_steps.rows()
            print("| fault | phase | faults answered | the run | verdict |\n|---|---|---|---|---|",
                  flush=True)  # fmt: skip
            for fault in args.faults:
                for at in args.phases:
                    began = time.monotonic()
                    outcome = _judge(store, fault, at, clean, unmaintained, now_ms)
                    outcomes.append(outcome)
                    took = time.monotonic() - began
                    print(f"{outcome.row()} <!-- {took:.0f} s -->", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 1 if any(o.broken or not o.armed for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
