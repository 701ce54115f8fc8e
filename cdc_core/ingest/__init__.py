"""Ingest: dump files found, registered once, and read as canonical records.

Invariant: a registered dump file never changes (a rewritten file is refused with
``DumpFileChanged``), so every read of a ``(partition, offset)`` range yields the same
records, one canonical copy per offset, however often the offsets were redelivered.

Modules: ``dumps`` (finding and parsing dump files), ``registry`` (the durable file
registry: metadata on the driver), ``canonical`` (the canonical reads of registered files,
above both), ``connect_files`` (Kafka Connect sink files), ``dump_bytes`` (a dump's bytes
read within the input limits, and its damage judged).
"""

from cdc_core.ingest.canonical import (
    CanonicalReads,
    CanonicalRecords,
    MissingDumpFile,
    starts_column,
)
from cdc_core.ingest.dumps import DumpFile, list_dump_files
from cdc_core.ingest.registry import DumpFileChanged, RegisteredFile, Registry

__all__ = [
    "CanonicalReads",
    "CanonicalRecords",
    "DumpFile",
    "DumpFileChanged",
    "MissingDumpFile",
    "RegisteredFile",
    "Registry",
    "list_dump_files",
    "starts_column",
]
