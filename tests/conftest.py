"""Shared fixtures: one real Spark session per test process, one Spark Connect server per
test run, and the lakes that cost a run each built once per test run (``sample_lake``,
``bad_input_lake``) for every test that only reads their tables; the pytest-xdist
workers share the server and the lakes."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pyspark.context
import pyspark.java_gateway
import pytest
from deltalake import DeltaTable
from filelock import FileLock
from pyspark.sql import SparkSession

from cdc_core.config import Config, load_config
from cdc_core.source import published_tables
from cdc_core.spark import get_spark
from pipelines.run import materialize
from pipelines.sample import write_sample
from tests.connect_server import SHARED_SERVER, running_server, shared_server, stop_shared_server
from tests.lake_rows import SampleLake
from tests.source import test_bad_inputs as bad_inputs

SAMPLE_FIRST_RUN_WINDOWS = 3  # of the sample's eight: the first run's slice


# Delta's Spark connector rebuilds a table's state from its log in this many partitions
# for every version it reads that it has not cached (each time-travel read): 50 by
# default, tasks that cost seconds per read on the few commits of a test's table. Only the
# tests read through delta-spark (reclock reads its logs with deltalake), so what they
# read is the same; the time-travel tests of tests/shard/test_delta_spark.py run several
# times faster.
DELTA_SNAPSHOT_PARTITIONS = "1"


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return get_spark(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "4",
            "spark.databricks.delta.snapshotPartitions": DELTA_SNAPSHOT_PARTITIONS,
        },
    )


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One warm Spark Connect server for the test run (under pytest-xdist, for every
    worker), started when a test first asks (tests/connect_server.py): the ``reclock``
    subprocesses whose local JVM is not what they test attach to it as thin clients."""
    if shared := os.environ.get(SHARED_SERVER):  # one for every pytest-xdist worker
        yield shared_server(Path(shared))
        return
    with running_server(tmp_path_factory.mktemp("spark-server") / "server.log") as remote:
        yield remote


_SHARED_FOLDER = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """The pytest-xdist controller names the folder of the run's one Connect server before
    it starts its workers, which inherit it (``SHARED_SERVER``). Under ``-m "not jvm"``
    this process may start no JVM, whatever fixture or test would (``refuse_jvm``)."""
    if config.option.markexpr == "not jvm":
        pyspark.java_gateway.launch_gateway = refuse_jvm
        pyspark.context.launch_gateway = refuse_jvm  # the name SparkContext calls
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        folder = Path(tempfile.mkdtemp(prefix="reclock-spark-server-"))
        os.environ[SHARED_SERVER] = str(folder)
        config.stash[_SHARED_FOLDER] = folder


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller, every worker done, stops the shared server: a server that does not
    stop cleanly fails the run."""
    folder = session.config.stash.get(_SHARED_FOLDER, None)
    if folder is None:
        return
    try:
        stop_shared_server(folder)
    except AssertionError as failed:
        print(f"\nthe shared Spark Connect server did not stop cleanly: {failed}",
              file=sys.stderr)  # fmt: skip
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], dict]
) -> dict:
    """``build(folder)`` once per test run, returning what it returned (JSON).

    Under pytest-xdist (``make test`` runs two workers) the first worker to ask builds in
    the run's shared temporary folder while the other waits on a lock, and both read the
    one lake: a lake costs minutes to build and is only read. A build that failed leaves
    its folder without the result, and the other worker refuses to build over it."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return build(tmp_path_factory.mktemp(name))
    run_root = tmp_path_factory.getbasetemp().parent  # one per run, shared by its workers
    folder, result = run_root / name, run_root / f"{name}.json"
    with FileLock(str(run_root / f"{name}.lock")):
        if not result.exists():
            if folder.exists():
                raise RuntimeError(f"{folder}: another worker's build failed (see its error)")
            folder.mkdir()
            result.write_text(json.dumps(build(folder)))
    return json.loads(result.read_text())


def _build_sample_lake(folder: Path) -> dict:
    config_file = write_sample(folder)
    config = load_config(config_file)
    first_run_ms = config.start_ms + SAMPLE_FIRST_RUN_WINDOWS * config.window_ms
    assert materialize(config, first_run_ms, exports=False)
    tables = [config.lake / s.name / table for s in config.sources for table in published_tables(s)]
    first_run_versions = {str(path): DeltaTable(str(path)).version() for path in tables}
    assert materialize(config, exports=False)
    return {"config": str(config_file), "first_run_ms": first_run_ms,
            "first_run_versions": first_run_versions}  # fmt: skip


@pytest.fixture(scope="session")
def sample_lake(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> SampleLake:
    """Materializing the whole sample costs minutes: built once per run, read by every
    test that needs a lake of it. Tests that write must copy it or build their own."""
    built = built_once(tmp_path_factory, "sample-lake", _build_sample_lake)
    versions = {Path(path): version for path, version in built["first_run_versions"].items()}
    return SampleLake(load_config(Path(built["config"])), built["first_run_ms"], versions)


def _build_bad_input_lake(folder: Path) -> dict:
    bad_inputs.write_landing(folder / "landing")
    config = bad_inputs.write_config(folder)
    assert materialize(config, exports=False), "bad inputs never fail a run"
    return {"config": str(folder / bad_inputs.CONFIG_FILE)}


@pytest.fixture(scope="session")
def bad_input_lake(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Config:
    """The corpus of bad inputs (tests/source/test_bad_inputs.py) through one run: read by
    its own tests and by the comparison of a run over Spark Connect with a run in process."""
    built = built_once(tmp_path_factory, "bad-inputs", _build_bad_input_lake)
    return load_config(Path(built["config"]))


# The fixtures that start a JVM: the process's Spark session, the lakes built with it, a
# Spark Connect server.
JVM_FIXTURES = frozenset({"spark", "sample_lake", "bad_input_lake", "connect_server"})
# Test files whose tests start a JVM another way (reclock subprocesses, Dagster runs of
# the assets, Spark started by the code under test), relative to the repository.
JVM_FILES = frozenset(
    {
        "tests/assets/test_retention.py",
        "tests/benchmarks/test_bench.py",
        "tests/catalog/test_hive.py",
        "tests/pipelines/test_class_archive.py",
        "tests/pipelines/test_cluster.py",
        "tests/pipelines/test_end_to_end.py",
        "tests/pipelines/test_quick_start.py",
        "tests/reclock/test_transactions.py",
        "tests/security/test_secrets.py",
        "tests/storage/test_rebuild_s3.py",
        "tests/storage/test_retire_s3.py",
        "tests/storage/test_sensor_s3.py",
        "tests/storage/test_spark_s3.py",
        "tests/test_documented_options.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that start a JVM are marked ``jvm`` (``make check`` runs the others, with the
    JVM refused: an unmarked test that starts one fails, naming the cause). The
    benchmark's smoke run goes last. Like the benchmark itself, which warms up before it
    times anything, it should meet a JVM whose just-in-time compiler has already seen
    Spark's hot paths; run first, it would mostly time that warm-up."""
    root = Path(__file__).resolve().parent.parent
    for item in items:
        named = JVM_FIXTURES & set(getattr(item, "fixturenames", ()))
        if named or item.path.resolve().relative_to(root).as_posix() in JVM_FILES:
            item.add_marker(pytest.mark.jvm)
    items.sort(key=lambda item: item.path.name == "test_bench.py")


class JvmRefused(RuntimeError):
    """A test selected as starting no JVM started one: list its file in ``JVM_FILES``."""


def refuse_jvm(*_: object, **__: object) -> None:
    """Stands for pyspark's JVM launcher under ``-m "not jvm"`` (``make check``)."""
    raise JvmRefused("a test of `-m 'not jvm'` starts a JVM: list its file in JVM_FILES")
