"""Kafka Connect storage sink files (S3/GCS/HDFS sinks) read as dumps.

The sinks write ``topics/<topic>/partition=<p>/<topic>+<p>+<start offset>.<ext>``: JSON
lines (``.json``, one value per line, ``null`` for a null value) or an Avro object container
file (``.avro``, one value per record), optionally gzip-compressed (``.gz``). Records carry
no position, key or timestamp: the i-th record of a file is offset ``start + i`` of its
partition (exact when the sink writes every record, as it does unless told to ignore null
values), and its timestamp is the file's modification time, an upper bound of the Kafka
timestamps of the records the sink flushed into it.

Told to (``store.kafka.keys``, ``store.kafka.headers``), the sink writes beside each value
file the same records' keys (``<name>.keys.<ext>``) and headers (``<name>.headers.<ext>``),
one per record in the same order, each in its own format (JSON lines or Avro, the headers
of a JSON file as ``{"headers": [{"key", "value"}, ...]}``). These *stored* files pair with
their value file by topic, partition and start offset (``stem``); a value file read with
them gets each record's key (as JSON text, as the values are) and headers; without them
its records have no key.

The sink writes a partition's records in order, file after file, each named by its first
record's offset: so the offsets between a file's last record and the next file's start
hold no record the sink consumed (a transactional producer's commit markers and aborted
transactions make such holes). ``registry.sink_gaps`` names them among the registered
files, and binding passes them as it passes records, never holding a partition there.

Each record becomes the kcat ``-J`` line that would describe it, on the executors, so
registration, parsing, error reporting and deduplication treat both layouts alike. A file
that cannot be read to its end, or whose stored files hold another number of records,
yields its records up to the damage and one line naming it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from cdc_core.envelopes.encodings import json_value
from cdc_core.ingest.dump_bytes import LineTooLong, LongLine, bounded_lines, opened
from cdc_core.spark import lines_by_path, path_frame
from cdc_core.storage import files as storage_files
from cdc_core.storage import on_workers
from cdc_core.vocabulary import DumpLayout, SinkStore

_NAME = re.compile(
    r"(?P<stem>(?P<topic>.+)\+(?P<partition>\d+)\+(?P<start>\d+))"
    r"(?:\.(?P<stored>keys|headers))?\.(?P<ext>json|avro)(?P<gz>\.gz)?"
)
READ_FAILURE = "Kafka Connect sink file is damaged"

# A value file's stored files, by what they store.
Stored = Mapping[SinkStore, str]


@dataclass(frozen=True)
class ConnectName:
    """What a sink file's name says: topic, partition, first offset, Avro or JSON, gzip,
    and what it stores beside its value file (None: it is the value file)."""

    topic: str
    partition: int
    start: int
    avro: bool
    gzip: bool
    stored: SinkStore | None = None


def connect_name(path: str) -> ConnectName | None:
    """The sink file a path names, or None for any other dump (a kcat file)."""
    match = _NAME.fullmatch(os.path.basename(path))
    if match is None:
        return None
    return ConnectName(
        match["topic"], int(match["partition"]), int(match["start"]), match["ext"] == "avro",
        bool(match["gz"]), SinkStore(match["stored"]) if match["stored"] else None,
    )


def stored_kind(path: str) -> SinkStore | None:
    """What the file at ``path`` stores beside its value file (None for a value file or a
    kcat dump)."""
    name = connect_name(path)
    return None if name is None else name.stored


def stem(path: str) -> str | None:
    """What pairs a sink file with its value file: its folder and ``topic+partition+start``
    as written (None for a kcat dump)."""
    match = _NAME.fullmatch(os.path.basename(path))
    if match is None:
        return None
    return os.path.join(os.path.dirname(path), match["stem"])


def layout_of(path: str) -> DumpLayout:
    """Which layout a dump file is in, judged by its name alone."""
    return DumpLayout.CONNECT if connect_name(path) is not None else DumpLayout.KCAT


def connect_lines(
    spark: SparkSession, paths: Sequence[str], stored: Mapping[str, Stored] | None = None
) -> DataFrame:
    """``value`` (a kcat line per record), ``file``: the records of sink files, read on the
    executors (one task per batch of files), each value file with its ``stored`` files."""
    stored = dict(stored or {})
    every = [*paths, *(p for files in stored.values() for p in files.values())]
    read = on_workers(functools.partial(_sink_lines, stored), every)
    return path_frame(spark, paths).mapInArrow(read, "value string, file string")


def _sink_lines(
    stored: Mapping[str, Stored], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: each path's kcat lines."""
    return lines_by_path(batches, lambda path: kcat_lines(path, stored.get(path)), pa.string())


class _Misaligned(ValueError):
    """A stored file holds another number of records than its value file."""


def kcat_lines(path: str, stored: Stored | None = None) -> Iterator[str]:
    """The kcat ``-J`` line of each record of sink value file ``path``, in file order, with
    the key and headers its ``stored`` files hold; a file damaged part-way (or whose stored
    files end before it, or go on after it) yields its records up to the damage, then a
    line that is no record and names the damage."""
    name = connect_name(path)
    if name is None or name.stored is not None:
        raise ValueError(f"not a Kafka Connect sink value file name: {path}")
    stored = stored or {}
    ts = storage_files.mtime_ms(path)
    parts: dict[str, Iterator[Any]] = {}
    if SinkStore.KEYS in stored:
        parts["key"] = _texts(stored[SinkStore.KEYS])
    if SinkStore.HEADERS in stored:
        parts["headers"] = _headers(stored[SinkStore.HEADERS])
    index = 0
    try:
        for payload in _texts(path):
            record = {"topic": name.topic, "partition": name.partition,
                      "offset": name.start + index, "ts": ts, "key": None,
                      "payload": payload}  # fmt: skip
            for field, values in parts.items():
                record[field] = next(values, _Misaligned)
                if record[field] is _Misaligned:
                    raise _Misaligned(_misaligned(stored, field, f"only {index} record(s)"))
            yield json.dumps(record)
            index += 1
        for field, values in parts.items():
            if next(values, _Misaligned) is not _Misaligned:
                raise _Misaligned(_misaligned(stored, field, f"more than its {index} record(s)"))
    except (OSError, EOFError, ValueError, zlib.error, UnicodeDecodeError) as error:
        yield f"{READ_FAILURE} after {index} record(s): {error}"


def _misaligned(stored: Stored, field: str, count: str) -> str:
    kind = SinkStore.KEYS if field == "key" else SinkStore.HEADERS
    return f"its {kind} file {stored[kind]} holds {count}"


def _sink_name(path: str) -> ConnectName:
    """The name of ``path``, a sink file by construction: a value file, or a file stored
    beside one and paired with it by its name."""
    name = connect_name(path)
    assert name is not None, path
    return name


def _records(path: str) -> Iterator[Any]:
    """Each record of a sink file: the text of a JSON line, or an Avro record's value,
    read within the input limits: a line over the line limit or a gzip bomb is damage
    (``InputLimitExceeded``)."""
    name = _sink_name(path)
    with opened(path, gzipped=name.gzip) as stream:
        if name.avro:
            # fastavro types its source as IO, yet reads records with read() alone.
            yield from fastavro.reader(stream)  # type: ignore[arg-type]
            return
        for line in bounded_lines(stream):
            if isinstance(line, LongLine):
                raise LineTooLong(line.describe())
            text = line.decode("utf-8").rstrip("\r")
            if text.strip():
                yield text


def _texts(path: str) -> Iterator[str | None]:
    """Each record's value (or key) as JSON text (None for a null one)."""
    avro = _sink_name(path).avro
    for record in _records(path):
        if avro:
            yield None if record is None else json.dumps(record, default=json_value)
        else:
            yield None if record.strip() == "null" else record


def _headers(path: str) -> Iterator[list[str | None]]:
    """Each record's headers as kcat writes them: names and values alternating. The sink
    writes a JSON line as ``{"headers": [{"key", "value"}, ...]}`` and an Avro record as
    the list itself; values are text or null."""
    avro = _sink_name(path).avro
    for record in _records(path):
        listed = record if avro else json.loads(record)
        if isinstance(listed, dict):
            listed = listed.get("headers")
        if not isinstance(listed, list) or not all(
            isinstance(h, dict) and isinstance(h.get("key"), str) for h in listed
        ):
            raise ValueError(f"headers file {path} holds a record that is no list of headers")
        yield [part for h in listed for part in (h["key"], h.get("value"))]
