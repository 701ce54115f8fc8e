"""Kafka topic dumps (kcat ``-J`` JSON lines, plain or gzip) read into Spark.

A dump line looks like::

    {"topic":"users","partition":0,"offset":12,"tstype":"create","ts":1767225600123,
     "broker":1,"headers":[],"key":"{\\"id\\":1}","payload":"{\\"name\\":\\"a\\"}"}

``key``/``payload`` are strings holding JSON (or null) and are kept as raw text here;
decoding them is the envelope's job. Files of topic T live anywhere under
``<landing>/<T>/``; they may overlap (a record redelivered) and arrive in any order,
so the same ``(partition, offset)`` can appear in several files and in ``records``.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from cdc_core.schemas import DUMP_RECORD, ERROR
from cdc_core.spark import local_frame

IN_PROGRESS_SUFFIXES = (".tmp", ".partial")
GZIP_SUFFIX = ".gz"

# How a line is parsed: position fields typed (a wrong JSON type yields null and fills
# ``_corrupt_record``), key/payload as text.
_CORRUPT = "_corrupt_record"
_LINE_SCHEMA = StructType(
    [f for f in DUMP_RECORD.fields if f.name != "file"] + [StructField(_CORRUPT, StringType())]
)
# What registration needs of a line: its position fields (and whether it parsed).
_SCAN_LINE = StructType(
    [f for f in DUMP_RECORD.fields if f.name in ("topic", "partition", "offset", "ts")]
    + [StructField(_CORRUPT, StringType())]
)
_REQUIRED_FIELDS = {
    "topic": "a string",
    "partition": "a 32-bit integer",
    "offset": "a 64-bit integer",
    "ts": "a 64-bit integer",
}
_SNIPPET_CHARS = 120

SCAN_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("partition", pa.int32()),
        ("min_offset", pa.int64()),
        ("max_offset", pa.int64()),
        ("min_ts", pa.int64()),
        ("max_ts", pa.int64()),
        ("records", pa.int64()),
    ]
)


@dataclass(frozen=True)
class DumpFile:
    """A dump file as listed: absolute path, size in bytes, modification time (epoch ms)."""

    path: str
    size: int
    mtime_ms: int


@dataclass(frozen=True)
class DumpRead:
    """Parsed dump lines: ``lines`` holds the ``DUMP_RECORD`` columns plus ``reason`` (null
    for a good record, else why the line failed); ``unreadable`` holds ``ERROR`` rows of
    files that could not be read at all. One frame for good and bad lines, so a caller
    that persists it parses every line once."""

    lines: DataFrame
    unreadable: DataFrame

    @property
    def records(self) -> DataFrame:
        return self.lines.where(F.col("reason").isNull()).select(*DUMP_RECORD.names)

    @property
    def errors(self) -> DataFrame:
        failed = self.lines.where(F.col("reason").isNotNull()).select(*ERROR.names)
        return failed.unionByName(self.unreadable)


def is_dump_name(name: str) -> bool:
    """Hidden and in-progress files (``.x``, ``_x``, ``x.tmp``, ``x.partial``) are not dumps yet."""
    return not name.startswith((".", "_")) and not name.endswith(IN_PROGRESS_SUFFIXES)


def list_dump_files(landing: Path, topic: str) -> list[DumpFile]:
    """Every dump of ``topic`` under ``<landing>/<topic>/``, recursively, sorted by path.

    Hidden folders (``.x``, ``_x``) are skipped along with hidden files, so archives and
    writers' staging areas can live inside the landing zone.
    """
    root = os.path.abspath(Path(landing) / topic)
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if not name.startswith((".", "_"))]
        for name in names:
            if is_dump_name(name):
                path = os.path.join(folder, name)
                status = os.stat(path)
                found.append(DumpFile(path, status.st_size, status.st_mtime_ns // 1_000_000))
    return sorted(found, key=lambda dump: dump.path)


def read_dumps(spark: SparkSession, files: Sequence[str], *, topic: str | None = None) -> DumpRead:
    """Parse dump files into records and errors, data-parallel.

    Lines are read with ``spark.read.text`` (gzip by the ``.gz`` suffix) and parsed with
    ``from_json`` against an explicit schema. A line that is not a JSON object, lacks or
    mistypes ``topic``/``partition``/``offset``/``ts``, has a negative partition or offset,
    or (when ``topic`` is given) names another topic becomes an error row with its file,
    whatever position could be parsed, and the reason; blank lines carry nothing and are
    skipped. ``file`` is the dump's absolute path (as ``list_dump_files`` spells it).

    A corrupt gzip file would fail the whole Spark read, so gzip files are first checked
    by a Spark job that decompresses each one on an executor (one task per file batch,
    streaming, nothing but the verdict returns to the driver). Corrupt files become one
    error row each and are left out of the read; the other files parse normally.
    Files that do not exist raise ``FileNotFoundError``.
    """
    readable, corrupt = _readable(spark, files)
    lines = _read_lines(spark, readable)
    parsed = lines.select(
        "value", "file", F.from_json("value", _LINE_SCHEMA, {"mode": "PERMISSIVE"}).alias("j")
    ).select("value", "file", "j.*", _problem(topic).alias("reason"))
    unreadable = local_frame(
        spark,
        [(None, None, None, None, reason, path) for path, reason in sorted(corrupt.items())],
        ERROR,
    )
    return DumpRead(
        lines=parsed.select(
            *(F.col(field.name).cast(field.dataType) for field in DUMP_RECORD.fields), "reason"
        ),
        unreadable=unreadable,
    )


def scan_dump_files(
    spark: SparkSession, files: Sequence[str], *, topic: str | None = None
) -> pa.Table:
    """Per (file, partition): offset and timestamp ranges and the record count.

    Tiny metadata for a registry of dumps, so a window reads only the files that can
    hold its offsets. Aggregated in Spark; only the summary reaches the driver. Lines
    and files that fail to parse are not counted (``read_dumps`` reports them).
    """
    readable, _ = _readable(spark, files)
    if not readable:
        return SCAN_SCHEMA.empty_table()
    # Spark's JSON reader with only the position fields: it still checks every line is
    # well formed, but builds no key or payload. A line counts exactly when
    # ``read_dumps`` would keep it as a record.
    lines = (
        spark.read.schema(_SCAN_LINE)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", _CORRUPT)
        .json(readable)
    )
    valid = F.col(_CORRUPT).isNull() & (F.col("partition") >= 0) & (F.col("offset") >= 0)
    for name in _REQUIRED_FIELDS:
        valid &= F.col(name).isNotNull()
    if topic is not None:
        valid &= F.col("topic") == F.lit(topic)
    summary = (
        lines.where(valid)
        .groupBy(F.col("_metadata.file_path").alias("uri"), "partition")
        .agg(
            F.min("offset").alias("min_offset"),
            F.max("offset").alias("max_offset"),
            F.min("ts").alias("min_ts"),
            F.max("ts").alias("max_ts"),
            F.count(F.lit(1)).alias("records"),
        )
        .select(_local_path(F.col("uri")).alias("file"), *SCAN_SCHEMA.names[1:])
        .orderBy("file", "partition")
    )
    return summary.toArrow().cast(SCAN_SCHEMA)


def _readable(spark: SparkSession, files: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The paths that can be read, and ``path -> reason`` for corrupt gzip files (left
    out). Files that do not exist raise ``FileNotFoundError``."""
    paths = [os.fspath(file) for file in files]
    missing = [path for path in paths if "://" not in path and not os.path.exists(path)]
    if missing:
        raise FileNotFoundError(f"dump files not found: {', '.join(missing)}")
    corrupt = find_corrupt_gzip_files(spark, [p for p in paths if p.endswith(GZIP_SUFFIX)])
    return [path for path in paths if path not in corrupt], corrupt


def find_corrupt_gzip_files(spark: SparkSession, paths: Sequence[str]) -> dict[str, str]:
    """``path -> reason`` for every gzip file that does not decompress to its end."""
    if not paths:
        return {}
    context = spark.sparkContext
    batches = context.parallelize(list(paths), min(len(paths), context.defaultParallelism))
    verdicts = batches.map(lambda path: (path, gzip_problem(path))).filter(lambda v: v[1])
    return dict(verdicts.collect())


def gzip_problem(path: str) -> str | None:
    """Why ``path`` is not a complete gzip stream, or None when it is (streams, O(1) memory)."""
    try:
        with gzip.open(path, "rb") as stream:
            while stream.read(1 << 20):
                pass
    except (OSError, EOFError, zlib.error) as error:
        return f"corrupt gzip file: {error}"
    return None


def _read_lines(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """Non-blank lines with the absolute path of their file."""
    if not paths:
        return local_frame(spark, [], "value string, file string")
    return (
        spark.read.text(list(paths))
        .select("value", _local_path(F.col("_metadata.file_path")).alias("file"))
        .where(F.trim("value") != "")
    )


def _local_path(uri: Column) -> Column:
    """Spark's URL-encoded file URI back to the path: ``file:/a%20b+c`` -> ``/a b+c``.

    Hadoop leaves ``+`` unescaped, so it is protected from ``url_decode``'s form decoding.
    """
    without_scheme = F.regexp_replace(uri, r"^file:(//)?(?=/)", "")
    return F.url_decode(F.replace(without_scheme, F.lit("+"), F.lit("%2B")))


def _problem(topic: str | None) -> Column:
    """The first thing wrong with a parsed line (null when the line is a good record)."""
    snippet = F.substring("value", 1, _SNIPPET_CHARS)
    checks = [
        (
            F.col(_CORRUPT).isNotNull() & F.json_object_keys("value").isNull(),
            F.concat(F.lit("not a JSON object: "), snippet),
        )
    ]
    for name, kind in _REQUIRED_FIELDS.items():
        raw = F.try_variant_get(F.try_parse_json("value"), f"$.{name}", "variant")
        checks.append((F.col(name).isNull() & raw.isNull(), F.lit(f"{name} is missing")))
        checks.append(
            (F.col(name).isNull(), F.concat(F.lit(f"{name} must be {kind}, got "), F.to_json(raw)))
        )
    checks += [
        (F.col("partition") < 0, F.concat(F.lit("negative partition "), F.col("partition"))),
        (F.col("offset") < 0, F.concat(F.lit("negative offset "), F.col("offset"))),
    ]
    if topic is not None:
        checks.append(
            (
                F.col("topic") != F.lit(topic),
                F.concat(F.lit("topic "), F.col("topic"), F.lit(f" found in a dump of {topic}")),
            )
        )
    checks.append((F.col(_CORRUPT).isNotNull(), F.concat(F.lit("malformed record: "), snippet)))
    problem = F.when(*checks[0])
    for condition, reason in checks[1:]:
        problem = problem.when(condition, reason)
    return problem
