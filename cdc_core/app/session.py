"""The Spark session a deployment's runs and commands use: starting it in process or
attaching it to a warm server, serving that server, and recording the class archive
that makes a fresh session start faster.

Every front end (the command line, Dagster's Spark resource) starts its session here, so
a run gets reclock's settings, its storage layer's s3a settings and the same attach
checks whichever front end launched it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from cdc_core.config import Config
from cdc_core.spark import CLASS_ARCHIVE, DRIVER_JAVA_OPTIONS, SPARK_REMOTE, get_spark
from cdc_core.spark_server import DEFAULT_PORT, config_server_conf, serve


def config_spark(config: Config) -> SparkSession:
    """The process's session with ``config``'s Spark settings; an object-store lake or
    landing zone adds the storage layer's s3a settings."""
    return get_spark(config.spark.master, config.spark.conf, (config.lake, config.landing))


def run_spark(
    settings: Mapping[str, str], places: Sequence[str], *, quick_start: bool
) -> SparkSession:
    """The session an orchestrated run uses: started in process with ``settings`` (a
    config's own, ``spark.master`` among them), or attached to the Spark Connect server
    they or ``SPARK_REMOTE`` name. ``places`` (the lake, the landing zone) on object
    storage add the s3a settings when it starts, so credentials never sit in a front
    end's settings; ``quick_start``: the run is short (one window), its driver starts
    quick."""
    return get_spark(conf=settings, places=places, quick_start=quick_start)


def serve_spark(
    config: Config | None,
    port: int = DEFAULT_PORT,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> int:
    """Run the warm Spark Connect server runs attach to, in the foreground until SIGTERM
    or SIGINT; its exit code (0 after a requested stop). With ``config`` it starts with
    the config's Spark settings and the s3a settings that reach its lake and landing zone
    (a client can hand its server neither); ``conf`` is applied over them."""
    fit = {} if config is None else config_server_conf(config)
    return serve(port, master, {**fit, **(conf or {})})


@contextmanager
def recording_class_archive(archive: Path = CLASS_ARCHIVE) -> Iterator[Path]:
    """Record into ``archive`` (yielded) the JVM classes what runs in the block loads, so
    later sessions map them and start faster.

    The block runs on the process's session, started in process (``SPARK_REMOTE`` is
    dropped) by a JVM that records the classes it loaded when it exits; after the block
    the session stops and the JVM exits, writing beside ``archive``. The file is moved
    into place only once a plain JVM maps it cleanly, so no JVM ever maps a half-written
    or damaged archive. A block that fails leaves the installed archive as it was."""
    os.environ.pop(SPARK_REMOTE, None)
    partial = archive.with_name(f".{archive.name}.{os.getpid()}")
    recording = f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds=off"  # skipped classes: quiet
    spark = get_spark(conf={DRIVER_JAVA_OPTIONS: recording})
    yield archive
    spark.stop()
    # The JVM writes the archive as it exits, which it does when its stdin closes.
    gateway = SparkContext._gateway
    if gateway is None:
        raise RuntimeError("the recorded run left no JVM to write the class archive")
    jvm = gateway.proc
    jvm.stdin.close()
    jvm.wait()
    if not partial.is_file():
        raise RuntimeError(f"the JVM wrote no class archive at {partial} (Java 17 or later?)")
    if not maps_cleanly(partial):
        partial.unlink()
        raise RuntimeError("the class archive written is damaged: none installed")
    partial.replace(archive)


def maps_cleanly(archive: Path) -> bool:
    """Whether a plain JVM starts with ``archive`` mapped: a damaged archive (a truncated
    write) crashes every JVM that maps it, so none is installed before one has."""
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else "java"
    check = [str(java), f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-version"]
    with tempfile.TemporaryDirectory() as crash_reports:  # where a crashing JVM writes one
        return subprocess.run(check, capture_output=True, cwd=crash_reports).returncode == 0
