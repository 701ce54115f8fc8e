"""The suite's warm Spark Connect server, and how a test's subprocess attaches to it.

A ``reclock`` subprocess in local mode pays a JVM start and Spark's first-use compilation
of its own (tens of CPU seconds on two cores); attached to one warm server it is a thin
client. The server is ``reclock spark-server`` as a user runs it, in the foreground of a
child process, on 127.0.0.1 and a free port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import yaml
from filelock import FileLock

from cdc_core.spark_server import STOPPED, free_port, listening

REPO = Path(__file__).parents[1]
START_TIMEOUT_S = 180


def client_env() -> dict[str, str]:
    """This process's environment without a Dagster home or a Connect address of its own."""
    return {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "SPARK_REMOTE")}


def attached(config_file: Path, remote: str) -> Path:
    """A copy of ``config_file`` beside it (same lake, same landing zone, same Spark
    settings) that runs over the Connect server at ``remote`` instead of its master; the
    original still runs in process."""
    settings = yaml.safe_load(config_file.read_text())
    spark = {k: v for k, v in settings.get("spark", {}).items() if k != "master"}
    settings["spark"] = {**spark, "remote": remote}
    copy = config_file.with_name(f"connect-{config_file.name}")
    copy.write_text(yaml.safe_dump(settings, sort_keys=False))
    return copy


def address(port: int) -> str:
    return f"sc://localhost:{port}"


def _started(
    log: Path, *, detached: bool = False, args: Sequence[str] = ()
) -> tuple[subprocess.Popen[bytes], int]:
    """A ``reclock spark-server`` on a free port, once it listens (``detached``: in a
    session of its own, so that it outlives the process that started it; ``args``: more
    of its options, e.g. ``--config``)."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", "spark-server", "--port", str(port),
             "--conf", "spark.driver.memory=2g", *args],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=client_env(),
            start_new_session=detached,
        )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_S
    while not listening(port):
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, "the server never listened"
        time.sleep(0.3)
    return process, port


@contextmanager
def running_server(log: Path, args: Sequence[str] = ()) -> Iterator[str]:
    """A server for the block (``args``: more of its options), at the ``sc://`` address
    yielded; at the end it must stop cleanly on SIGTERM (exit 0, its port closed), as the
    Spark Connect guide says it does."""
    process, port = _started(log, args=args)
    try:
        yield address(port)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
    assert code == 0, log.read_text(errors="replace")[-3000:]
    assert not listening(port), "the server's JVM outlived SIGTERM"


# Set by the pytest-xdist controller for its workers: the folder of the run's one server.
SHARED_SERVER = "RECLOCK_TESTS_SPARK_SERVER"


def shared_server(folder: Path) -> str:
    """The test run's one server, shared by its workers: the first worker to ask starts
    it detached (it outlives that worker) and writes where it listens; the others read
    that. ``stop_shared_server`` ends it once every worker is done."""
    found = folder / "spark-server.json"
    with FileLock(str(folder / "spark-server.lock")):
        if not found.exists():
            process, port = _started(folder / "spark-server.log", detached=True)
            found.write_text(json.dumps({"pid": process.pid, "port": port}))
    return address(json.loads(found.read_text())["port"])


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_shared_server(folder: Path) -> None:
    """SIGTERM to the run's shared server, if a worker started one: it must stop as
    cleanly as ``running_server``'s (``serve`` reports the stop, the port closes)."""
    found = folder / "spark-server.json"
    if not found.exists():
        return
    started = json.loads(found.read_text())
    os.kill(started["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 60
    while _running(started["pid"]):
        assert time.monotonic() < deadline, "the shared server outlived SIGTERM by a minute"
        time.sleep(0.2)
    log = (folder / "spark-server.log").read_text(errors="replace")
    assert STOPPED in log, log[-3000:]
    assert not listening(started["port"]), "the shared server's JVM outlived SIGTERM"
