"""What every envelope reads for one batch: the records, where they sit in time, the
source's shape and the prior state of its own outputs.

Invariant: the prior state is as of just before the batch's first time, so applying a
batch equals applying its windows one by one in time order.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_core.envelopes.result import stamped
from cdc_core.updates import TIME
from cdc_core.vocabulary import Format, IncludeField


@dataclass(frozen=True)
class EnvelopeBatch:
    """RECLOCKED ``records`` of a batch of binding times: each at the time in its own
    ``time`` column (``time`` None), or all at one ``time`` (then without that column).
    ``prior_*``: the source's ``changes``, ``errors`` and classic DEBEZIUM ``dedup``
    updates before the batch (None: an empty shard); each envelope reads what it needs.
    ``format``: how payloads are encoded; ``prior_records``: the RECLOCKED updates before
    the batch, which only the ``materialize`` envelope reads (a CDCv2 stream is judged
    whole: a message bound long ago may complete a time only now); ``include``: the Kafka
    metadata columns each row carries from its record."""

    records: DataFrame
    _: KW_ONLY
    topic: str
    key_schema: StructType
    value_schema: StructType
    time: int | None = None
    prior_changes: DataFrame | None = None
    prior_errors: DataFrame | None = None
    prior_dedup_state: DataFrame | None = None
    format: Format = Format.JSON
    prior_records: DataFrame | None = None
    include: tuple[IncludeField, ...] = ()

    def timed_records(self) -> DataFrame:
        """The records, each with its binding time in a bigint ``time`` column (ValueError
        when the records and ``time`` disagree on where the time is)."""
        if self.time is not None:
            if TIME in self.records.columns:
                raise ValueError("records carry a time column: pass time=None to use it")
            return stamped(self.records, self.time)
        if TIME not in self.records.columns:
            raise ValueError("records without a time column need time= (their one window's time)")
        return self.records.withColumn(TIME, F.col(TIME).cast("long"))
