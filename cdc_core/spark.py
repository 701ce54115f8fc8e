"""The one Spark session of a process, configured so its Parquet matches Delta."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from cdc_core import storage
from cdc_core.connect_token import TOKEN_ENV, client_token
from cdc_core.network import is_loopback

# Settings every reclock session needs: Delta expects microsecond timestamps (not
# INT96), all times are UTC, and Spark's _SUCCESS markers have no place in a table.
REQUIRED_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.parquet.summary.metadata.level": "NONE",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Delta Lake's Spark connector: users (and reclock's own reads) query the tables as
    # Delta, with SQL (`delta.`path``, DESCRIBE HISTORY, OPTIMIZE, VACUUM) and time travel.
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Decoding many sources in one plan reads a JSON object's values as variants to tell
    # a string from a number (``envelopes.slots``); Spark's JSON reader takes an object
    # whose keys repeat (the last wins), so reading it as a variant must not refuse it.
    "spark.sql.variant.allowDuplicateKeys": "true",
}

# Where `make` puts the connector's jars (pom.xml); RECLOCK_JARS points elsewhere.
JARS_FOLDER = Path(os.environ.get("RECLOCK_JARS", Path(sys.prefix) / "jars"))

# Defaults suited to a laptop or a CI box; any of them can be overridden.
DEFAULT_CONF: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.app.name": "reclock",
    "spark.sql.shuffle.partitions": "8",
    "spark.default.parallelism": "8",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "4g",
    "spark.sql.adaptive.enabled": "true",
    # Lets adaptive execution coalesce the partitions of cached frames too: a run caches
    # its parsed dumps and envelope inputs, and small inputs then run one task, not many.
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
    # Cached frames hold mostly distinct text (keys, payloads): the cache's column
    # encodings find nothing to compress there and cost CPU to try.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    "spark.sql.files.maxPartitionBytes": "64m",
    # Each task moves its files straight into the batch's staging folder when it commits
    # (version 1 moves them twice, through a job folder: on S3 a copy and a delete each).
    # Safe here: a staging folder is no table until its Delta commit names its files, and
    # a task tried again writes the same file names over its first attempt's.
    "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version": "2",
    # Reads name their files exactly (from a Delta log or the dump registry): listing
    # them is a stat per file, which the driver does at once; above the default threshold
    # (32 paths) Spark would run a listing job with a task per file for every read.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
    # delta-spark's VACUUM lists a table in this many tasks (Spark's default is 10,000):
    # a minute of empty tasks on a local session for a table of a few files.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8",
    # pyspark tags every Column function with its Python call site for error messages: five
    # gateway round trips and a walk of the Python stack per call, half the gateway calls
    # of a run (2,800 per warm window, 1,260 without). reclock names its own errors.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # How long the driver JVM waits for its Python side to connect to a socket it opened
    # to hand over results (a collect, a frame built from local rows); 15 s by default. On
    # a machine loaded past its cores the Python side was seen to take longer, and the
    # JVM's closing the socket failed the run ("Connection reset by peer").
    "spark.python.authenticate.socketTimeout": "120s",
}


def delta_jars_conf(folder: Path = JARS_FOLDER) -> dict[str, str]:
    """How the session gets Delta's jars: the ones setup fetched, shipped to executors with
    ``spark.jars``; else Spark resolves the connector matching the installed ``delta-spark``
    from Maven Central itself (``spark.jars.packages``, cached in ~/.ivy2)."""
    jars = sorted(folder.glob("*.jar"))
    if jars:
        return {"spark.jars": ",".join(str(jar) for jar in jars)}
    return {"spark.jars.packages": delta_package()}


def delta_package() -> str:
    """The Maven coordinates of Delta's connector for this pyspark and delta-spark: Delta
    publishes one artifact per Spark minor version."""
    spark_minor = ".".join(version("pyspark").split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_2.13:{version('delta-spark')}"


# A class-data sharing archive of the JVM classes a reclock session loads, written by
# ``reclock class-archive`` (``make`` writes it after fetching the jars). A driver JVM that
# maps it skips loading, parsing and verifying most of Spark's classes, which a fresh
# process's start and first queries pay (docs/design/2026-11-28-class-archive.md has the
# figures). The JVM checks the archive against its own build and class path and runs
# without it (quietly) when they differ; a damaged file would crash it, so only a checked
# one is installed.
CLASS_ARCHIVE = Path(
    os.environ.get("RECLOCK_CLASS_ARCHIVE", Path(sys.prefix) / "spark-classes.jsa")
)
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# Options that already decide the JVM's class sharing (writing an archive, or none at all).
_CLASS_SHARING_OPTIONS = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare")


def with_class_archive(options: str, archive: Path = CLASS_ARCHIVE) -> str:
    """The driver JVM's ``options`` with ``archive`` mapped, when it exists and the
    options do not decide class sharing themselves."""
    if not archive.is_file() or any(flag in options for flag in _CLASS_SHARING_OPTIONS):
        return options
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds=off {options}".strip()


# The driver JVM of a short run compiles with C1 alone. The optimizing compiler (C2) pays
# off in long runs only: one scheduled window of 100 records took 16.9 s instead of 20.3 s
# in a fresh process without it (C2's compilations fight the run for 2 cores), while a
# million records in 20 windows in one process ran 1.18x slower
# (docs/design/2026-11-28-class-archive.md).
# Compiling with C1 alone also shrinks the JVM's default code cache to 48 MB, which one
# window of a 200-table transaction group filled ("CodeCache is full. Compiler has been
# disabled": the rest of the run interpreted); it keeps the tiered default, 240 MB
# (reserved address space: only what is compiled takes memory).
# A config's own ``-XX:TieredStopAtLevel`` comes later in the options, and wins.
QUICK_START_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def session_conf(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    places: Sequence[os.PathLike[str] | str] = (),
    *,
    quick_start: bool = False,
) -> dict[str, str]:
    """The full Spark configuration: defaults, then the s3a settings that reach
    ``places`` (a config's lake and landing zone; none when all are local), then the
    caller's (a config may set its own ``spark.hadoop.fs.s3a.*``), then what reclock
    requires; the driver maps the class archive (``with_class_archive``), and for a
    ``quick_start`` (a short run) compiles with C1 alone (``QUICK_START_OPTIONS``)."""
    merged = {**DEFAULT_CONF, **delta_jars_conf(), **storage.spark_conf(*places), **(conf or {})}
    if master:
        merged["spark.master"] = master
    options = with_class_archive(merged.pop(DRIVER_JAVA_OPTIONS, ""))
    if quick_start:
        options = f"{QUICK_START_OPTIONS} {options}".strip()
    if options:
        merged[DRIVER_JAVA_OPTIONS] = options
    return {**merged, **REQUIRED_CONF}


# Where a Connect client finds its server when the config names none (pyspark reads it too).
SPARK_REMOTE = "SPARK_REMOTE"
# How a client names a server on this machine (``_connect``).
LOCALHOST = "localhost"


class SparkConnectConflict(ValueError):
    """The config names both a classic master and a Spark Connect address: a Connect client
    has no master of its own (the server's decides where tasks run), so one must go."""


class ConnectRefused(PermissionError):
    """The Spark Connect server refused the token this client sent (or sent none)."""


class SparkServerUnfit(RuntimeError):
    """The Spark Connect server lacks a setting reclock needs that a client cannot set on
    its own session (static settings: Delta's extension and catalog, Hadoop's output
    committer): start it with ``reclock spark-server`` or with these settings."""


def named_remote(master: str | None, conf: Mapping[str, str] | None) -> str | None:
    """The Spark Connect address a config names itself (``spark.remote``, or an ``sc://``
    master), or None; SparkConnectConflict when it also names a classic master."""
    conf = conf or {}
    master = master or conf.get("spark.master")
    named = conf.get("spark.remote") or (master if master and master.startswith("sc://") else None)
    if named and not named.startswith("sc://"):
        raise SparkConnectConflict(f"spark.remote must be an sc://host:port address, got {named}")
    if named and master and not master.startswith("sc://"):
        raise SparkConnectConflict(
            f"spark.master {master} and Spark Connect {named} are both configured: a Connect "
            "client runs no tasks itself, the server's master does; drop one of them"
        )
    return named


def remote_address(master: str | None, conf: Mapping[str, str] | None) -> str | None:
    """The Spark Connect address a session should attach to, or None for a classic driver.

    The config decides first (``named_remote``); a config naming neither a remote nor a
    master attaches to ``SPARK_REMOTE`` from the environment (``make ui`` sets it), so one
    config runs in process or against a warm server unchanged. A config naming a classic
    master while ``SPARK_REMOTE`` is set is refused: which one was meant?"""
    named = named_remote(master, conf)
    if named:
        return named
    env = os.environ.get(SPARK_REMOTE)
    master = master or (conf or {}).get("spark.master")
    if env and master:
        raise SparkConnectConflict(
            f"spark.master {master} is configured but {SPARK_REMOTE}={env} is set in the "
            f"environment: unset {SPARK_REMOTE} to run in process, or drop spark.master"
        )
    return env or None


def get_spark(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    places: Sequence[os.PathLike[str] | str] = (),
    *,
    quick_start: bool = False,
) -> SparkSession:
    """Return the process's Spark session, creating it on first use.

    Reuses an active session so that a process never pays the JVM start-up twice; over
    Spark Connect (``remote_address``) it attaches to the server instead of starting one.
    ``places``: where the session's data lives (a config's lake and landing zone); an
    object-store one gets the session the storage layer's s3a settings. A Connect client
    cannot give its server Hadoop settings: the server must be started with them.
    ``quick_start``: the process runs a short job (see ``session_conf``); it decides only
    for a session started here, in process.
    """
    remote = remote_address(master, conf)
    if remote is not None:
        return _attach(remote, conf or {})
    # Python workers must run the interpreter (and virtualenv) of the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = session_conf(master, conf, places, quick_start=quick_start)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # A session that was running already keeps the Hadoop settings it started with; its
    # data sources (Delta's log too) also read Hadoop keys from the session conf, unprefixed.
    for key, value in settings.items():
        if key.startswith("spark.hadoop.fs.s3a."):
            spark.conf.set(key.removeprefix("spark.hadoop."), value)
    return spark


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no SparkContext, no JVM here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _attach(remote: str, conf: Mapping[str, str]) -> SparkSession:
    """A Connect session of its own on the server at ``remote``: the process's one session
    (each process gets a fresh server-side session, so runs never share temporary views or
    settings), with reclock's settings applied where a session may change them and checked
    where only the server decides. Every ask is a round trip: the server's settings are
    read at once, and only those that differ are set."""
    wanted = {
        key: value
        for key, value in {**DEFAULT_CONF, **conf, **REQUIRED_CONF}.items()
        if key.startswith("spark.sql.") and key != "spark.remote"
    } | REQUIRED_CONF
    spark = _connect(remote)
    try:
        current = spark.conf.getAll
    except Exception as error:  # the first call to the server: where it judges the token
        if "UNAUTHENTICATED" not in str(error):
            raise
        raise ConnectRefused(
            f"the Spark Connect server at {remote} refused this client's token: give the "
            f"server's token in {TOKEN_ENV}, or leave it unset to use the token file the "
            "server wrote (`reclock spark-server` started as this user)"
        ) from None
    wrong = {}
    for key, value in wanted.items():
        if current.get(key) == value:
            continue
        if key.startswith("spark.sql.") and spark.conf.isModifiable(key):
            spark.conf.set(key, value)
        elif key in REQUIRED_CONF:
            wrong[key] = (value, current.get(key))
    if wrong:
        detail = ", ".join(f"{key}={have!r} (needs {want!r})" for key, (want, have) in
                           wrong.items())  # fmt: skip
        raise SparkServerUnfit(
            f"the Spark Connect server at {remote} lacks settings a session cannot set: "
            f"{detail}; start it with `reclock spark-server` or pass them with --conf"
        )
    return spark


def _connect(remote: str) -> SparkSession:
    """A Connect client session on ``remote``. A server on this machine gets its token
    (``connect_token.client_token``) and is reached as ``localhost``, the one host pyspark
    sends a token to without TLS; the token goes into the channel alone, never into the
    address, a setting or the environment. Another host is reached as its address says
    (TLS and a token in ``;use_ssl=true;token=...`` or ``SPARK_CONNECT_AUTHENTICATE_TOKEN``)."""
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    url = urlsplit("http" + remote.removeprefix("sc"))
    if not is_loopback(url.hostname):
        return SparkSession.builder.remote(remote).getOrCreate()
    port = url.port or DefaultChannelBuilder.default_port()
    channel = DefaultChannelBuilder(f"sc://{LOCALHOST}:{port}{url.path}")
    if channel.getDefault(DefaultChannelBuilder.PARAM_TOKEN, None) is None:
        channel.set(DefaultChannelBuilder.PARAM_TOKEN, client_token(port))
    # What ``SparkSession.builder.remote(...).getOrCreate()`` would mark: this process is a
    # Connect client, so pyspark's functions build Connect expressions.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    # A Connect session stands in for a classic one (pyspark's stubs type them apart).
    return cast(SparkSession, ConnectSession.builder.channelBuilder(channel).getOrCreate())


def server_conf(master: str | None = None, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a Spark Connect server for reclock runs with: the full session configuration
    (Delta's jars and extension, reclock's required settings) minus client-only keys."""
    merged = session_conf(master, {k: v for k, v in (conf or {}).items() if k != "spark.remote"})
    merged.pop("spark.remote", None)
    return merged


# A run that reads at most this much (its dumps and the prior outputs its envelope joins)
# plans each query once, with SMALL_RUN_SHUFFLE_PARTITIONS. Adaptive execution runs every
# shuffle stage as a Spark job of its own and plans again between them: a one-minute
# window then costs twice the jobs, while its statistics can change nothing that matters
# for data a task or two holds. Larger runs (a backfill, a source with a large state) keep
# it: there it coalesces partitions and turns joins into broadcasts from measured sizes.
SMALL_RUN_BYTES = 64 * 2**20
SMALL_RUN_SHUFFLE_PARTITIONS = "2"
ADAPTIVE = "spark.sql.adaptive.enabled"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
STATIC_PLAN = {ADAPTIVE: "false", SHUFFLE_PARTITIONS: SMALL_RUN_SHUFFLE_PARTITIONS}
# A small run also evaluates its expressions without generating code. Generated code holds
# a query's literals, and a window's bounds and frontiers are literals: no class compiled
# for one window serves the next, so each window compiled about a hundred (Janino), which
# took longer than evaluating its rows. Two lakes fed the same windows in turn (10k
# records a window over 100k keys, on one warm session): a window took 4.21 s interpreted
# against 4.93 s compiled (medians of 13; per window 0.89x). A backfill keeps code
# generation, which pays off over many rows.
WHOLE_STAGE_CODEGEN = "spark.sql.codegen.wholeStage"
CODEGEN_FACTORY = "spark.sql.codegen.factoryMode"
INTERPRETED = {WHOLE_STAGE_CODEGEN: "false", CODEGEN_FACTORY: "NO_CODEGEN"}


@contextmanager
def planned_for_input(
    spark: SparkSession, input_bytes: int, configured: Mapping[str, str]
) -> Iterator[bool]:
    """Plan the queries of the block for a run reading ``input_bytes``: small
    (``planned_as``) up to ``SMALL_RUN_BYTES``; yields whether the plans are static."""
    with planned_as(spark, input_bytes <= SMALL_RUN_BYTES, configured) as static:
        yield static


# The plan a block of concurrent work fixed for every query in it (``planned_together``):
# the settings are the session's, shared by every thread, so no thread may change them.
_fixed_plans: list[bool] = []


@contextmanager
def planned_together(
    spark: SparkSession, input_bytes: int, configured: Mapping[str, str]
) -> Iterator[bool]:
    """Plan every query of the block, in any thread, as one run reading ``input_bytes``
    would be (``planned_for_input``), and keep it: a ``planned_as`` inside the block
    changes nothing and yields the plan fixed here.

    Why: sources served concurrently share the session, whose plan settings are global;
    one source's small plan set and restored around its own queries would change the
    plans of its neighbours' queries mid-flight. Plans change, never results."""
    with planned_for_input(spark, input_bytes, configured) as static:
        _fixed_plans.append(static)
        try:
            yield static
        finally:
            _fixed_plans.pop()


@contextmanager
def planned_as(spark: SparkSession, small: bool, configured: Mapping[str, str]) -> Iterator[bool]:
    """Plan the queries of the block statically (``STATIC_PLAN``) and interpreted
    (``INTERPRETED``) when ``small``, unless the ``configured`` settings (a config's
    ``spark.conf``) decide adaptive execution themselves; a config that sets either
    ``INTERPRETED`` key decides code generation itself. A static plan takes its shuffle
    partitions literally, so a small run gets few whatever a backfill is tuned to. The
    session's settings are restored after the block; yields whether the plans are static.
    Plans change, never results: every query means the same either way. Inside
    ``planned_together`` the plan fixed there holds, and nothing is changed."""
    if _fixed_plans:
        yield _fixed_plans[-1]
        return
    static = small and ADAPTIVE not in configured
    if not static:
        yield False
        return
    decides_codegen = any(key in configured for key in INTERPRETED)
    wanted = {**STATIC_PLAN, **({} if decides_codegen else INTERPRETED)}
    before = {key: spark.conf.get(key) for key in wanted}
    for key, value in wanted.items():
        spark.conf.set(key, value)
    try:
        yield True
    finally:
        for key, was in before.items():
            if was is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, was)


def local_frame(spark: SparkSession, data: Any, schema: Any = None) -> DataFrame:
    """Tiny driver-side data (metadata rows, or none at all) as a single partition: split
    over the default parallelism, every stage reading it would run a task per slice. An
    empty Arrow table brings its schema along (a Connect client infers none from no rows)."""
    if schema is None and isinstance(data, pa.Table) and data.num_rows == 0:
        schema = from_arrow_schema(data.schema)
    return spark.createDataFrame(data, schema).coalesce(1)


def path_frame(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """``path``: one row per file, spread over up to the default parallelism of tasks, for
    per-file work on the executors through ``mapInArrow`` (what ``parallelize`` did, in the
    DataFrame API that Spark Connect also has)."""
    paths = list(paths)
    frame = local_frame(spark, [(path,) for path in paths], "path string")
    tasks = _tasks_for(spark, len(paths))
    return frame if tasks == 1 else frame.repartition(tasks)


def index_frame(spark: SparkSession, count: int) -> DataFrame:
    """``id``: the numbers ``0 .. count - 1``, spread over up to the default parallelism
    of tasks without a shuffle, for work the driver listed (by index) to be done on the
    executors through ``mapInArrow``."""
    return spark.range(0, count, 1, _tasks_for(spark, count))


def _tasks_for(spark: SparkSession, items: int) -> int:
    """How many tasks share ``items`` pieces of work: one each, up to the default
    parallelism (the ``spark.default.parallelism`` setting, else the shuffle partitions)."""
    parallelism = int(
        spark.conf.get("spark.default.parallelism", None)
        or spark.conf.get(SHUFFLE_PARTITIONS)
        or "200"  # Spark's own default
    )
    return max(1, min(items, parallelism))


# Lines per Arrow batch, and bytes after which a batch ends sooner: a file's lines never
# sit in memory at once, nor do many lines near the line limit (``dump_bytes``).
LINE_BATCH = 4096
BATCH_BYTES = 16 * 2**20


def lines_by_path(
    batches: Iterator[pa.RecordBatch], lines_of: Callable[[str], Iterable[Any]],
    value_type: pa.DataType,
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """For ``mapInArrow`` over ``path_frame``: ``value``, ``file`` batches of each path's
    lines as ``lines_of`` yields them, at most ``LINE_BATCH`` lines at a time, and no more
    once they hold ``BATCH_BYTES``."""
    schema = pa.schema([("value", value_type), ("file", pa.string())])

    def batch_of(path: str, lines: list[Any]) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict({"value": lines, "file": [path] * len(lines)}, schema)

    for batch in batches:
        for path in batch.column("path").to_pylist():
            lines: list[Any] = []
            size = 0
            for line in lines_of(path):
                lines.append(line)
                size += len(line)
                if len(lines) == LINE_BATCH or size >= BATCH_BYTES:
                    yield batch_of(path, lines)
                    lines, size = [], 0
            if lines:
                yield batch_of(path, lines)
