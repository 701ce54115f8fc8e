"""MATERIALIZE: a topic carrying a CDCv2 stream becomes the source's ``changes``.

How a stream meets IntoTime: the messages are reclocked like any records (each Kafka
message once, at the first window whose binding covers its offset). At binding time
``E`` the stream made of every message bound at or before ``E`` is complete through a
frontier ``F(E)`` (the data-parallel reader's judgement); ``F`` only grows with more
messages, so each update ``(data, t, diff)`` lands in ``changes`` exactly once, at the
first ``E`` with ``t < F(E)``. Duplicated, reordered and re-batched streams therefore give
the same ``changes``. The stream's own times order its updates and decide completeness;
unlike Materialize, which keeps them as the collection's timestamps in a timeline of
their own, reclock advances them to the window that completes them, so a CDCv2 source
shares the IntoTime axis of every other source.

A message that does not decode is an ``errors`` row with its position (its facts are
missing, so the frontier stops before them); contradictory facts (a diff or count
contradiction) raise the reader's named error and the run writes nothing.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from cdc_core.cdcv2.source_format import decode_cdcv2_dumps
from cdc_core.cdcv2.spark_decode import DecodedStream
from cdc_core.cdcv2.spark_reader import ImportedStream, read_stream
from cdc_core.envelopes.batch import EnvelopeBatch
from cdc_core.envelopes.columns import output_schema
from cdc_core.envelopes.result import EnvelopeResult, stamped
from cdc_core.frontier import TimeFrontier
from cdc_core.schemas import ERROR, RECLOCKED
from cdc_core.spark import local_frame
from cdc_core.updates import DIFF, TIME, consolidate
from cdc_core.vocabulary import Envelope


def apply_materialize(batch: EnvelopeBatch) -> EnvelopeResult:
    """The ``materialize`` envelope: at each binding time of the batch, the updates that
    the messages bound so far newly complete (see the module docstring). Only the batch's
    binding times and the streams' progress statements reach the driver."""
    output = output_schema(Envelope.MATERIALIZE, batch.key_schema, batch.value_schema)
    records = batch.timed_records().select(*RECLOCKED.names, TIME)
    history = records
    if batch.prior_records is not None:
        history = batch.prior_records.select(*RECLOCKED.names, TIME).unionByName(records)
    times = sorted(row[TIME] for row in records.select(TIME).distinct().collect())
    updates_schema = StructType([*output.fields, *_SHARD_FIELDS])
    changes = local_frame(records.sparkSession, [], updates_schema)
    errors = local_frame(records.sparkSession, [], StructType([*ERROR.fields, *_SHARD_FIELDS]))
    completeness: dict[int, TimeFrontier] = {}
    previous = TimeFrontier.minimum()
    if batch.prior_records is not None and times:
        previous = _complete(history.filter(F.col(TIME) < times[0]), batch).frontier
    for time in times:
        imported = _complete(history.filter(F.col(TIME) <= time), batch)
        completeness[time] = imported.frontier
        completed = imported.updates
        if previous.time is not None:
            completed = completed.filter(F.col(TIME) >= previous.time)
        changes = changes.unionByName(stamped(completed.drop(TIME), time))
        undecodable = _decoded(records.filter(F.col(TIME) == time), batch).errors
        errors = errors.unionByName(stamped(undecodable, time).withColumn(DIFF, F.lit(1)))
        previous = imported.frontier
    return EnvelopeResult(
        changes=consolidate(changes, output.names),
        errors=consolidate(errors, ERROR.names),
        completeness=completeness,
    )


_SHARD_FIELDS = [StructField(TIME, LongType()), StructField(DIFF, LongType())]


def _decoded(records: DataFrame, batch: EnvelopeBatch) -> DecodedStream:
    """The messages among reclocked ``records``, decoded on the executors."""
    dumps = records.select(
        "payload",
        F.lit(batch.topic).alias("topic"),
        "partition",
        "offset",
        "key",
        F.lit(None).cast("string").alias("file"),
    )
    return decode_cdcv2_dumps(dumps, batch.value_schema, batch.format)


def _complete(records: DataFrame, batch: EnvelopeBatch) -> ImportedStream:
    """The complete part of the stream the reclocked ``records`` hold."""
    decoded = _decoded(records, batch)
    return read_stream(decoded.updates, decoded.progress)
