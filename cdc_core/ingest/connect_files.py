"""Kafka Connect storage sink files (S3/GCS/HDFS sinks) read as dumps.

The sinks write ``topics/<topic>/partition=<p>/<topic>+<p>+<start offset>.<ext>``: JSON
lines (``.json``, one value per line, ``null`` for a null value) or an Avro object container
file (``.avro``, one value per record), optionally gzip-compressed (``.gz``). Records carry
no position, key or timestamp: the i-th record of a file is offset ``start + i`` of its
partition (exact when the sink writes every record, as it does unless told to ignore null
values), its key is absent, and its timestamp is the file's modification time, an upper
bound of the Kafka timestamps of the records the sink flushed into it.

Each record becomes the kcat ``-J`` line that would describe it, on the executors, so
registration, parsing, error reporting and deduplication treat both layouts alike. A file
that cannot be read to its end yields its records up to the damage and one line naming it.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import fastavro
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from cdc_core.envelopes.encodings import json_value
from cdc_core.ingest.dump_bytes import LineTooLong, LongLine, bounded_lines, opened
from cdc_core.spark import lines_by_path, path_frame
from cdc_core.storage import files as storage_files
from cdc_core.storage import on_workers
from cdc_core.vocabulary import DumpLayout

_NAME = re.compile(
    r"(?P<topic>.+)\+(?P<partition>\d+)\+(?P<start>\d+)\.(?P<ext>json|avro)(?P<gz>\.gz)?"
)
READ_FAILURE = "Kafka Connect sink file is damaged"


@dataclass(frozen=True)
class ConnectName:
    """What a sink file's name says: topic, partition, first offset, Avro or JSON, gzip."""

    topic: str
    partition: int
    start: int
    avro: bool
    gzip: bool


def connect_name(path: str) -> ConnectName | None:
    """The sink file a path names, or None for any other dump (a kcat file)."""
    match = _NAME.fullmatch(os.path.basename(path))
    if match is None:
        return None
    return ConnectName(
        match["topic"], int(match["partition"]), int(match["start"]), match["ext"] == "avro",
        bool(match["gz"]),
    )


def layout_of(path: str) -> DumpLayout:
    """Which layout a dump file is in, judged by its name alone."""
    return DumpLayout.CONNECT if connect_name(path) is not None else DumpLayout.KCAT


def connect_lines(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """``value`` (a kcat line per record), ``file``: the records of sink files, read on the
    executors (one task per batch of files)."""
    return path_frame(spark, paths).mapInArrow(on_workers(_sink_lines, paths),
                                               "value string, file string")  # fmt: skip


def _sink_lines(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: each path's kcat lines."""
    return lines_by_path(batches, kcat_lines, pa.string())


def kcat_lines(path: str) -> Iterator[str]:
    """The kcat ``-J`` line of each record of sink file ``path``, in file order; a file
    damaged part-way yields its records up to the damage, then a line that is no record
    and names the damage."""
    name = connect_name(path)
    if name is None:
        raise ValueError(f"not a Kafka Connect sink file name: {path}")
    ts = storage_files.mtime_ms(path)
    index = 0
    try:
        for payload in _values(path, name):
            offset = name.start + index
            record = {"topic": name.topic, "partition": name.partition, "offset": offset,
                      "ts": ts, "key": None, "payload": payload}  # fmt: skip
            yield json.dumps(record)
            index += 1
    except (OSError, EOFError, ValueError, zlib.error, UnicodeDecodeError) as error:
        yield f"{READ_FAILURE} after {index} record(s): {error}"


def _values(path: str, name: ConnectName) -> Iterator[str | None]:
    """Each record's value as JSON text (None for a null value), read within the input
    limits: a line over the line limit or a gzip bomb is damage (``InputLimitExceeded``)."""
    with opened(path, gzipped=name.gzip) as stream:
        if name.avro:
            for value in fastavro.reader(stream):
                yield None if value is None else json.dumps(value, default=json_value)
            return
        for line in bounded_lines(stream):
            if isinstance(line, LongLine):
                raise LineTooLong(line.describe())
            text = line.decode("utf-8").rstrip("\r")
            if not text.strip():
                continue
            yield None if text.strip() == "null" else text
