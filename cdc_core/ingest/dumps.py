"""Kafka topic dumps (kcat ``-J`` JSON lines, plain or gzip, and Kafka Connect sink files,
see ``connect_files``) found, scanned and read into Spark; ``canonical`` builds the one
copy per ``(partition, offset)`` of registered files on these reads.

A dump line looks like::

    {"topic":"users","partition":0,"offset":12,"tstype":"create","ts":1767225600123,
     "broker":1,"headers":[],"key":"{\\"id\\":1}","payload":"{\\"name\\":\\"a\\"}"}

``key``/``payload`` are strings holding JSON (or null) and are kept as raw text here;
decoding them is the envelope's job. So are ``headers``, read only for a source that
includes them (``reclocked_schema``): every other read parses no more than before.
Files of topic T live anywhere under ``<landing>/<T>/``; they may overlap (a record
redelivered) and arrive in any order, so the same ``(partition, offset)`` can appear in
several files and in ``records``.
"""

from __future__ import annotations

import functools
import os
import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from cdc_core.expressions import built_once
from cdc_core.ingest.connect_files import Stored, connect_lines, layout_of
from cdc_core.ingest.dump_bytes import (
    GZIP_SUFFIX,
    MAX_LINE_BYTES,
    DumpDamage,
    dump_damage,
    salvaged_lines,
)
from cdc_core.schemas import DUMP_RECORD, ERROR, HEADERS
from cdc_core.spark import lines_by_path, local_frame, path_frame
from cdc_core.storage import FileEntry, LocationLike, on_workers, spark_path
from cdc_core.storage import files as storage_files
from cdc_core.vocabulary import DumpLayout

IN_PROGRESS_SUFFIXES = (".tmp", ".partial")
# A read's per-file column naming the topic the file's lines must name (see ``read_dumps``).
FILE_TOPIC = "_topic"

# How a line is parsed: position fields typed (a wrong JSON type yields null and fills
# ``_corrupt_record``), key/payload (and headers, when asked for) as text.
_CORRUPT = "_corrupt_record"
_RECORD_FIELDS = [f for f in DUMP_RECORD.fields if f.name != "file"]
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
# Java regexes: a JSON string literal (possessive: linear), and a ``}`` followed by
# something JSON does not allow after an object's end.
_STRING_LITERAL = r'"(?:[^"\\]++|\\.)*+"'
_AFTER_BRACE = r'\}\s*[^\s,}\]"]'

SCAN_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("partition", pa.int32()),
        ("min_offset", pa.int64()),
        ("max_offset", pa.int64()),
        ("min_ts", pa.int64()),
        ("max_ts", pa.int64()),
        ("records", pa.int64()),
        ("damaged_lines", pa.int64()),
    ]
)


# A dump file as the storage layer lists it: path, size, modification time (epoch ms);
# one whose ``problem`` says why it cannot be read at all (a link loop, a folder that
# cannot be listed, a pipe) has size and mtime -1 and is registered anyway, so that it is
# reported, never skipped.
DumpFile = FileEntry


@dataclass(frozen=True)
class DumpRead:
    """Parsed dump lines: ``lines`` holds the ``DUMP_RECORD`` columns (then ``headers``,
    when read) plus ``reason`` (null for a good record, else why the line failed),
    ``positioned`` (a failed line whose ``(partition, offset)`` is known: see
    ``_positioned``) and ``dropped`` (for a good record whose line goes on after its JSON
    object, why that text is lost); ``unreadable`` holds ``ERROR`` rows of files that
    could not be read at all. One frame for good and bad lines, so a caller that persists
    it parses every line once."""

    lines: DataFrame
    unreadable: DataFrame

    @property
    def records(self) -> DataFrame:
        """The lines that decoded to a record, as ``DUMP_RECORD`` rows (then ``headers``)."""
        headers = [HEADERS.name] if HEADERS.name in self.lines.columns else []
        return self.lines.where(F.col("reason").isNull()).select(*DUMP_RECORD.names, *headers)

    @property
    def errors(self) -> DataFrame:
        """The lines that failed or were dropped, as ``ERROR`` rows with their source position."""
        return error_rows(self.lines).unionByName(self.unreadable)


def error_rows(lines: DataFrame, carried: Sequence[str] = ()) -> DataFrame:
    """``ERROR`` rows of parsed ``lines`` (with ``file``), after the ``carried`` columns:
    one per failed line, one per record whose line went on after its JSON object."""
    failed = lines.where(F.col("reason").isNotNull()).select(*carried, *ERROR.names)
    dropped = lines.where(F.col("dropped").isNotNull()).select(
        *carried,
        *(F.col("dropped" if name == "reason" else name).alias(name) for name in ERROR.names),
    )
    return failed.unionByName(dropped)


def is_dump_name(name: str) -> bool:
    """Hidden and in-progress files (``.x``, ``_x``, ``x.tmp``, ``x.partial``) are not dumps yet."""
    return not name.startswith((".", "_")) and not name.endswith(IN_PROGRESS_SUFFIXES)


def list_dump_files(landing: LocationLike, topic: str) -> list[DumpFile]:
    """Every dump of ``topic`` under ``<landing>/<topic>/``, recursively, sorted by path.

    Hidden folders (``.x``, ``_x``) are skipped along with hidden files, so archives and
    writers' staging areas can live inside the landing zone. A path that cannot be read
    (see ``walk_files``: a folder that cannot be listed, a link loop, a dangling link,
    anything but a regular file) is listed with its ``problem`` instead of failing the
    listing or being skipped; so is a link leading out of the topic's folder, or the
    folder itself when it leads out of the landing zone: never followed, so a writer of
    the landing zone cannot make reclock read, archive or delete a file elsewhere. Local
    folders and ``s3://`` prefixes alike, by the storage layer."""
    root = storage_files.normalize(storage_files.join(str(landing), topic))
    listed = storage_files.walk_files(root, enter=is_visible_folder, within=str(landing))
    return dump_objects(root, listed)


def is_visible_folder(name: str) -> bool:
    """Folders named ``.x`` or ``_x`` hold no dumps (archives, writers' staging areas)."""
    return not name.startswith((".", "_"))


def dump_objects(root: str, entries: Iterable[FileEntry]) -> list[DumpFile]:
    """The dumps among ``entries``, files listed under the folder ``root``: names hidden
    or in progress, or under a hidden folder, are left out; a dump's path listed
    unreadable (``problem``) stays, to be reported, as does ``root`` itself listed
    unreadable (see ``list_dump_files``)."""
    found = []
    for entry in entries:
        if entry.path == root:
            found.append(entry)
            continue
        *folders, name = posixpath.relpath(entry.path, root).split("/")
        if is_dump_name(name) and all(is_visible_folder(part) for part in folders):
            found.append(entry)
    return found


def read_dumps(
    spark: SparkSession,
    files: Sequence[str],
    *,
    topic: str | None = None,
    damaged: Mapping[str, DumpDamage] | None = None,
    headers: bool = False,
    stored: Mapping[str, Stored] | None = None,
    catalog: DataFrame | None = None,
) -> DumpRead:
    """Parse dump files into records and errors, data-parallel.

    Lines are read with ``spark.read.text`` (gzip by the ``.gz`` suffix) and parsed with
    ``from_json`` against an explicit schema. A line that is not valid UTF-8, is not a
    JSON object, lacks or mistypes ``topic``/``partition``/``offset``/``ts``, has a
    negative partition or offset, or (when ``topic`` is given) names another topic
    becomes an error row with its file, whatever position could be parsed, and the
    reason (``positioned`` when that position can be trusted: see ``_positioned``);
    blank lines carry nothing and are skipped. ``file`` is the dump's absolute
    path (as ``list_dump_files`` spells it).

    A damaged gzip file would fail the whole Spark read, and a line or a gzip stream
    beyond the input limits (``dump_bytes``) would exhaust its memory, so gzip files and
    files larger than the line limit are first checked by a Spark job that streams each
    one on an executor (one task per file batch, nothing but the verdict returns to the
    driver). Each damaged file becomes one error row; of a truncated one, the complete
    lines before the cut are still read, of one with lines over the limit every other
    line (the same lines on every read), of any other damaged one nothing is. ``damaged``: the
    verdicts already known for ``files`` (a registry's, taken when the immutable files
    were registered), which spares that job. Files that do not exist raise
    ``FileNotFoundError``. ``headers``: also read each record's headers (as JSON text,
    null when the line has none). ``stored``: the key and header files a Kafka Connect
    sink value file is read with (by its path). ``catalog``: per-file columns (``file``
    and what the caller carries along, its ids or arrival times) joined to every line
    before it is parsed; its ``FILE_TOPIC`` column, when it has one, is the topic each
    file's lines must name (so one read serves the dumps of many topics).
    """
    readable, damaged = _readable(spark, files, damaged)
    fields = [*_RECORD_FIELDS, *([HEADERS] if headers else [])]
    line_schema = StructType([*fields, StructField(_CORRUPT, StringType())])
    lines = _read_lines(spark, readable, damaged, stored)
    carried: list[str] = []
    if catalog is not None:
        # A left join (every line's file is in the catalog): an inner one would add a
        # not-null filter on ``file`` that Spark computes apart, decoding every path twice.
        lines = lines.join(F.broadcast(catalog), "file", "left")
        carried = [name for name in catalog.columns if name != "file"]
    by_file = FILE_TOPIC in carried
    if by_file and topic is not None:
        raise ValueError("a read checks either one topic or each file's, not both")
    parsed = _parse(lines, line_schema, topic, by_file=by_file)
    unreadable = local_frame(
        spark,
        [(None, None, None, None, d.reason, path) for path, d in sorted(damaged.items())],
        ERROR,
    )
    return DumpRead(
        lines=parsed.select(
            *(F.col(field.name).cast(field.dataType) for field in DUMP_RECORD.fields),
            *([HEADERS.name] if headers else []),
            "reason",
            "positioned",
            "dropped",
            *carried,
        ),
        unreadable=unreadable,
    )


@dataclass(frozen=True)
class DumpScan:
    """``summary``: per (file, partition) the ``SCAN_SCHEMA`` statistics of the records;
    ``bad_lines``: per file with any, how many of its lines are no record;
    ``damaged``: ``path -> reason`` of the damaged files (see ``dump_damage``)."""

    summary: pa.Table
    bad_lines: dict[str, int]
    damaged: dict[str, str]


def scan_dump_files(
    spark: SparkSession, files: Sequence[str], *, topic: str | Mapping[str, str] | None = None
) -> DumpScan:
    """Per (file, partition): offset and timestamp ranges of the lines with a position
    (records and positioned damaged lines), the record count and the damaged count; per
    file, the count of lines that are no record.

    Tiny metadata for a registry of dumps, so a window reads only the files that can
    hold its offsets (a damaged line's offset too: it is bound like a record), and knows
    which files have errors to report. Aggregated in Spark (one job, whatever the number
    of topics: ``topic`` is every file's topic, or each file's by path, so a run scans
    the new dumps of all its sources at once); only the summary reaches the driver. A
    line counts as a record, or as positioned, exactly when ``read_dumps`` would judge it
    so: the lines are parsed by the same ``_parse``, and a line naming another topic than
    its file's is judged on the driver, from the per-topic counts, as ``read_dumps``
    judges it (no record, no position).
    """
    readable, damaged = _readable(spark, files)
    reasons = {path: d.reason for path, d in damaged.items()}
    kcat = [path for path in readable if layout_of(path) is DumpLayout.KCAT]
    # Sink files and the salvaged lines of damaged files, named by local paths.
    others = [path for path in readable if layout_of(path) is DumpLayout.CONNECT]
    frames = []
    if others or any(damage.salvaged for damage in damaged.values()):
        lines = _read_lines(spark, others, damaged)
        frames.append(_position_stats(_parse(lines, _SCAN_LINE, None)))
    if kcat:
        uri = F.col("_metadata.file_path").alias("file")
        text = _nonblank(spark.read.text([spark_path(p) for p in kcat]).select("value", uri))
        # Paths decoded once per group, not once per line.
        by_uri = _position_stats(_parse(text, _SCAN_LINE, None))
        frames.append(by_uri.withColumn("file", _dump_path(F.col("file"))))
    if not frames:
        return DumpScan(SCAN_SCHEMA.empty_table(), {}, reasons)
    stats = functools.reduce(DataFrame.unionByName, frames).toArrow()
    # Sorted on the driver: a Spark sort would cost a sampling job for a few rows.
    grouped = _of_their_topic(stats, topic).sort_by(
        [("file", "ascending"), ("partition", "ascending")]
    )
    placed = grouped.filter(pc.is_valid(grouped.column("partition")))
    summary = placed.select(SCAN_SCHEMA.names).cast(SCAN_SCHEMA)
    bad_lines: dict[str, int] = {}
    for row in grouped.select(["file", "damaged_lines"]).to_pylist():
        if row["damaged_lines"]:
            bad_lines[row["file"]] = bad_lines.get(row["file"], 0) + row["damaged_lines"]
    return DumpScan(summary, bad_lines, reasons)


def _of_their_topic(stats: pa.Table, topic: str | Mapping[str, str] | None) -> pa.Table:
    """Per (file, partition) statistics from per (file, partition, named topic) ones, with
    the lines that name another topic than their file's (``topic``: every file's, or each
    file's by path; None: any topic goes) counted as damaged lines without a position,
    as ``_problem`` and ``_positioned`` judge such a line when given the file's topic."""
    files = stats.column("file").to_pylist()
    expected = [topic if topic is None or isinstance(topic, str) else topic.get(f) for f in files]
    named = stats.column("topic")
    foreign = pc.fill_null(
        pc.not_equal(named, pa.array(expected, pa.string())), False
    )  # a line naming no topic, or a file of no known topic, is judged as it parsed
    no_position = pa.nulls(len(stats), pa.int64())
    judged = pa.table({
        "file": stats.column("file"),
        "partition": pc.if_else(foreign, pa.nulls(len(stats), pa.int32()), stats["partition"]),
        **{name: pc.if_else(foreign, no_position, stats[name])
           for name in ("min_offset", "max_offset", "min_ts", "max_ts")},
        "records": pc.if_else(foreign, 0, stats["records"]),
        "damaged_lines": pc.if_else(
            foreign, pc.add(stats["records"], stats["damaged_lines"]), stats["damaged_lines"]
        ),
    })  # fmt: skip
    folded = judged.group_by(["file", "partition"]).aggregate([
        ("min_offset", "min"), ("max_offset", "max"), ("min_ts", "min"), ("max_ts", "max"),
        ("records", "sum"), ("damaged_lines", "sum"),
    ])  # fmt: skip
    return folded.rename_columns(
        [name.rsplit("_", 1)[0] if name.endswith(("_min", "_max", "_sum")) else name
         for name in folded.column_names]
    )  # fmt: skip


def _position_stats(lines: DataFrame) -> DataFrame:
    """Per (``file``, partition, the ``topic`` the lines name): offset and ts ranges,
    records and damaged lines; lines without a position count as damaged under a null
    partition."""
    good = F.col("reason").isNull()
    partition = F.when(good | F.col("positioned"), F.col("partition")).alias("partition")
    return lines.groupBy("file", partition, "topic").agg(
        F.min("offset").alias("min_offset"),
        F.max("offset").alias("max_offset"),
        F.min("ts").alias("min_ts"),
        F.max("ts").alias("max_ts"),
        F.count(F.when(good, 1)).alias("records"),
        F.count(F.when(~good, 1)).alias("damaged_lines"),
    )


def _parse(
    lines: DataFrame, schema: StructType, topic: str | None, *, by_file: bool = False
) -> DataFrame:
    """``value``, ``file``, the fields of ``schema``, ``reason`` (null for a record),
    ``positioned`` (a failed line whose position is known) and ``dropped`` (for a record
    followed by more text on its line: that text is lost), then the lines' other columns.
    A line must name ``topic`` (any topic when None), or with ``by_file`` the one in its
    ``FILE_TOPIC`` column."""
    parsed = F.from_json("value", schema, {"mode": "PERMISSIVE"}).alias("j")
    carried = [name for name in lines.columns if name not in ("value", "file")]
    judged = lines.select("value", "file", parsed, *carried).select(
        "value", "file", "j.*", _problem(topic, by_file).alias("reason"), *carried
    )
    positioned = F.col("reason").isNotNull() & _positioned(topic, by_file)
    return judged.withColumn("positioned", positioned).withColumn(
        "dropped", F.when(F.col("reason").isNull(), _dropped_text())
    )


def _expected_topic(topic: str | None, by_file: bool) -> Column | None:
    """The topic a line must name: ``topic``, or its file's (``FILE_TOPIC``) with
    ``by_file``; None when any goes."""
    if by_file:
        return F.col(FILE_TOPIC)
    return None if topic is None else F.lit(topic)


@built_once
def _positioned(topic: str | None, by_file: bool) -> Column:
    """Whether a line still says where it sits in the topic: a whole JSON object (a line
    cut short could end in a cut number) whose partition and offset read and are not
    negative, and whose topic, when it names one, is the dump's. Such a line is bound
    like a record even when the rest of it is damaged, so it never holds back the
    records after it in its partition."""
    known = (
        F.col("partition").isNotNull()
        & F.col("offset").isNotNull()
        & (F.col("partition") >= 0)
        & (F.col("offset") >= 0)
    )
    expected = _expected_topic(topic, by_file)
    if expected is not None:
        known &= F.col("topic").isNull() | (F.col("topic") == expected)
    whole = F.json_object_keys(F.make_valid_utf8("value")).isNotNull()
    return F.coalesce(known & whole, F.lit(False))


def _readable(
    spark: SparkSession, files: Sequence[str], known: Mapping[str, DumpDamage] | None = None
) -> tuple[list[str], dict[str, DumpDamage]]:
    """The paths Spark's text reader can read, and the damaged files (left out of them;
    checked now unless ``known``): kcat files that are gzip or larger than the line
    limit, whose lines a smaller file cannot exceed. Files that do not exist raise
    ``FileNotFoundError``."""
    paths = [os.fspath(file) for file in files]
    found = {path: storage_files.info(path) for path in paths}
    missing = [path for path, info in found.items() if info.type == pafs.FileType.NotFound]
    if missing:
        raise FileNotFoundError(f"dump files not found: {', '.join(missing)}")
    if known is None:  # a sink file reports its own damage, where it is
        damaged = find_damaged_files(spark, [
            path for path, info in found.items()
            if layout_of(path) is DumpLayout.KCAT
            and (path.endswith(GZIP_SUFFIX) or info.size > MAX_LINE_BYTES)
        ])  # fmt: skip
    else:
        damaged = {path: known[path] for path in paths if path in known}
    return [path for path in paths if path not in damaged], damaged


def find_damaged_files(spark: SparkSession, paths: Sequence[str]) -> dict[str, DumpDamage]:
    """``path -> damage`` for every kcat dump among ``paths`` that ``dump_damage`` judges
    damaged, each judged on an executor (only the damaged files' verdicts reach the
    driver)."""
    if not paths:
        return {}
    verdicts = path_frame(spark, paths).mapInArrow(on_workers(_verdicts, paths), _VERDICT)
    return {row.path: DumpDamage(row.reason, row.salvaged) for row in verdicts.collect()}


_VERDICT = "path string, reason string, salvaged boolean"


def _verdicts(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: the damage of each damaged file among the batches' paths."""
    for batch in batches:
        judged = [(path, dump_damage(path)) for path in batch.column("path").to_pylist()]
        damaged = [(path, damage) for path, damage in judged if damage]
        yield pa.RecordBatch.from_pydict(
            {
                "path": [path for path, _ in damaged],
                "reason": [damage.reason for _, damage in damaged],
                "salvaged": [damage.salvaged for _, damage in damaged],
            },
            schema=pa.schema(
                [("path", pa.string()), ("reason", pa.string()), ("salvaged", pa.bool_())]
            ),  # fmt: skip
        )


def _read_lines(
    spark: SparkSession,
    paths: Sequence[str],
    damaged: dict[str, DumpDamage],
    stored: Mapping[str, Stored] | None = None,
) -> DataFrame:
    """Non-blank lines with the absolute path of their file: every line of ``paths`` (a
    sink value file's with the key and header files ``stored`` for it) and the salvaged
    lines of the damaged files among ``damaged``."""
    frames = []
    kcat = [path for path in paths if layout_of(path) is DumpLayout.KCAT]
    if kcat:
        text = spark.read.text([spark_path(p) for p in kcat])
        frames.append(text.select("value", _dump_path(F.col("_metadata.file_path")).alias("file")))
    connect = [path for path in paths if layout_of(path) is DumpLayout.CONNECT]
    if connect:
        frames.append(connect_lines(spark, connect, stored))
    salvaged = sorted(path for path, damage in damaged.items() if damage.salvaged)
    if salvaged:
        frames.append(_salvaged_lines(spark, salvaged))
    if not frames:
        return local_frame(spark, [], "value string, file string")
    return _nonblank(functools.reduce(DataFrame.unionByName, frames))


def _nonblank(lines: DataFrame) -> DataFrame:
    """Blank lines carry nothing: they are neither records nor errors."""
    return lines.where(F.trim("value") != "")


def _salvaged_lines(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """``value``, ``file``: the salvaged lines of damaged files (``salvaged_lines``), read
    on the executors; bytes become text unchanged (invalid UTF-8 stays invalid, to be
    judged)."""
    salvaged = path_frame(spark, paths).mapInArrow(on_workers(_salvage, paths),
                                                   "value binary, file string")  # fmt: skip
    return salvaged.select(F.col("value").cast("string").alias("value"), "file")


def _salvage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: each path's salvaged lines."""
    return lines_by_path(batches, salvaged_lines, pa.binary())


def _dump_path(uri: Column) -> Column:
    """Spark's URL-encoded file URI back to the dump's path as listed:
    ``file:/a%20b+c`` -> ``/a b+c``, ``s3a://b/k%20x`` -> ``s3://b/k x``.

    Hadoop leaves ``+`` unescaped, so it is protected from ``url_decode``'s form decoding.
    """
    without_scheme = F.regexp_replace(uri, r"^file:(//)?(?=/)", "")
    named = F.regexp_replace(without_scheme, r"^s3a://", "s3://")
    return F.url_decode(F.replace(named, F.lit("+"), F.lit("%2B")))


def _snippet() -> Column:
    """The start of the line as valid UTF-8 (invalid bytes shown as U+FFFD)."""
    return F.substring(F.make_valid_utf8("value"), 1, _SNIPPET_CHARS)


@built_once
def _dropped_text() -> Column:
    """Why the rest of a line after its JSON object is lost, or null when there is none.

    Spark's JSON parsers take the first object of ``{..}{..}`` or ``{..} x`` and ignore
    the rest (the scan counts that object, so it stays the line's record). In JSON, a
    ``}`` outside strings is followed only by ``,``, ``}``, ``]`` or the end: byte tests
    pick the few lines worth the regex test with string literals blanked out."""
    suspect = (
        ~F.rtrim("value").endswith("}")
        | F.col("value").contains("}{")
        | F.col("value").contains("} {")
    )
    trailing = F.regexp_replace("value", _STRING_LITERAL, '""').rlike(_AFTER_BRACE)
    return F.when(
        suspect & trailing,
        F.concat(
            F.lit("text after the JSON object is lost (two records on one line?): "), _snippet()
        ),
    )


@built_once
def _problem(topic: str | None, by_file: bool) -> Column:
    """The first thing wrong with a parsed line (null when the line is a good record).
    Every reason is valid UTF-8: a snippet of a line that is not shows its invalid bytes
    as U+FFFD, so the errors table stays readable by any reader."""
    snippet = _snippet()
    checks = [
        (
            ~F.is_valid_utf8("value"),
            F.concat(F.lit("dump line is not valid UTF-8 (bad bytes shown as \ufffd): "), snippet),
        ),
        (
            F.col(_CORRUPT).isNotNull() & F.json_object_keys("value").isNull(),
            F.concat(F.lit("not a JSON object: "), snippet),
        ),
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
    expected = _expected_topic(topic, by_file)
    if expected is not None:
        checks.append(
            (
                F.col("topic") != expected,
                F.concat(F.lit("topic "), F.col("topic"), F.lit(" found in a dump of "), expected),
            )
        )
    checks.append((F.col(_CORRUPT).isNotNull(), F.concat(F.lit("malformed record: "), snippet)))
    problem = F.when(*checks[0])
    for condition, reason in checks[1:]:
        problem = problem.when(condition, reason)
    return problem
