"""Ingest: dump files found, registered once, and read as canonical records.

Invariant: a registered dump file never changes (a rewritten file is refused with
``DumpFileChanged``), so every read of a ``(partition, offset)`` range yields the same
records, one canonical copy per offset, however often the offsets were redelivered.

Modules: ``dumps`` (finding and parsing dump files), ``registry`` (the durable file
registry and the canonical reads of a range).
"""

from cdc_core.ingest.dumps import DumpFile, list_dump_files
from cdc_core.ingest.registry import (
    CanonicalReads,
    DumpFileChanged,
    MissingDumpFile,
    RegisteredFile,
    Registry,
)

__all__ = [
    "CanonicalReads",
    "DumpFile",
    "DumpFileChanged",
    "MissingDumpFile",
    "RegisteredFile",
    "Registry",
    "list_dump_files",
]
