"""Classic DEBEZIUM: ``-before``/``+after`` per change event, deduplicated by source position.

Debezium does not commit its read position with its output, so after a crash it re-sends a
contiguous range of events. Following the envelopes seed (and Materialize's 2022 classic
envelope), events are deduplicated per Kafka partition, in Kafka order:
- a streaming event is used iff its *composite* source position is greater than every
  position seen before in the partition (the high-water mark); never by the LSN alone:
  Postgres ``(last_commit_lsn, lsn, op rank d < c < other)`` with ``last_commit_lsn`` =
  ``source.sequence[0]`` (JSON null sorts first) and the top-level ``source.lsn``; MySQL
  ``(binlog file index by first appearance in the partition, pos, row)``;
- a snapshot event (``source.snapshot`` true or a string other than "false") is used iff
  its key was not seen in the partition's snapshot before. The snapshot ends at the
  partition's first streaming event: its seen keys are then dropped, so the steady state
  is O(1) per partition.

The seed's constraints are checked; a violation is an error row with category
``constraint violated`` and a detail naming the constraint (``has_constraint_violations``
tells the asset check). The event is not applied, except for ``contiguous re-sends``,
which is detected on a new event after the damage (a re-send that stopped below the
high-water mark, so events in between may have been dropped); that event is applied.
- ``primary key``: the record has a key;
- ``before image``: ``u`` and ``d`` events carry a before image;
- ``connector``: the event comes from the postgresql or mysql connector;
- ``source position``: a streaming event carries its position fields;
- ``contiguous re-sends``: see above;
- ``snapshot``: no snapshot event after the partition's snapshot ended (a new snapshot
  cannot be deduplicated: use DEBEZIUM UPSERT).
Undecodable keys/values, unknown ops and truncates are errors as in DEBEZIUM UPSERT; they
are never retracted. A null value (the tombstone after a delete) carries nothing.

The dedup state is a shard of its own (``DEDUP_STATE``), read back at the previous time, so
a restart never re-reads the topic.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from cdc_core.envelopes.batch import EnvelopeBatch
from cdc_core.envelopes.columns import output_schema
from cdc_core.envelopes.debezium import (
    DELETE_OP,
    SOURCE,
    event_problem,
    stage_events,
    truncate_problem,
)
from cdc_core.envelopes.decode import decode_json
from cdc_core.envelopes.reasons import CONSTRAINT, VALUE_DECODE, error_rows, reason
from cdc_core.envelopes.result import EnvelopeResult, negated, prior_updates, stamped
from cdc_core.envelopes.upsert import key_problem, value_problem, with_key
from cdc_core.schemas import ERROR
from cdc_core.updates import consolidate
from cdc_core.vocabulary import Envelope

POSTGRES = "postgresql"
MYSQL = "mysql"
CREATE_OP = "c"
UPDATE_OP = "u"

# A composite source position; compared field by field.
POSITION = StructType(
    [
        StructField("major", LongType()),  # Postgres last_commit_lsn (-1: null), MySQL file index
        StructField("minor", LongType()),  # Postgres lsn, MySQL pos
        StructField("tiebreak", LongType()),  # Postgres op rank, MySQL row
    ]
)

CURSOR = "cursor"
BINLOG_FILE = "binlog_file"
SNAPSHOT_KEY = "snapshot_key"

# The dedup state shard's data columns; one row per entry:
# - ``cursor`` (one per partition): ``streaming`` (the snapshot has ended), ``hwm`` (the
#   greatest position seen), ``last`` (the position of the latest streaming event);
# - ``binlog_file``: ``name`` has index ``file_index`` in the partition;
# - ``snapshot_key``: ``name`` (canonical key JSON) was seen during the partition's snapshot.
DEDUP_STATE = StructType(
    [
        StructField("partition", IntegerType()),
        StructField("entry", StringType()),
        StructField("name", StringType()),
        StructField("file_index", LongType()),
        StructField("streaming", BooleanType()),
        StructField("hwm", POSITION),
        StructField("last", POSITION),
    ]
)


def state_rows(rows: DataFrame, entry: str, **columns: Column) -> DataFrame:
    """DEDUP_STATE rows + ``diff`` (from ``rows.diff`` or +1); unnamed columns are null."""
    diff = F.col("diff") if "diff" in rows.columns else F.lit(1)
    return rows.select(
        F.col("partition").cast("int").alias("partition"),
        F.lit(entry).alias("entry"),
        *[
            columns.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name)
            for f in DEDUP_STATE.fields[2:]
        ],
        diff.cast("long").alias("diff"),
    )


def position_text(position: Column) -> Column:
    """A source position as ``(a, b, ...)`` text, for error messages."""
    parts = [position[name].cast("string") for name in POSITION.names]
    return F.concat(F.lit("("), F.concat_ws(", ", *parts), F.lit(")"))


def decode_events(
    records: DataFrame, key_schema: StructType, value_schema: StructType
) -> DataFrame:
    """One row per non-tombstone event: position parts, images, and ``reason`` (null when
    the event is usable)."""
    staged = with_key(stage_events(records).filter(F.col("event_text").isNotNull()), key_schema)
    for image in ("before", "after"):
        staged = decode_json(staged, f"{image}_text", value_schema, image)
    staged = decode_json(staged, "source_text", SOURCE, "source", required=())
    staged = staged.withColumn(
        "sequence", F.from_json(F.col("source.sequence"), ArrayType(StringType()))
    ).withColumn("commit_text", F.try_element_at("sequence", F.lit(1)))
    src = F.col("source")
    op = F.col("op")
    is_snapshot = src["snapshot"].isNotNull() & (src["snapshot"] != "false")
    commit_lsn = F.col("commit_text").try_cast("long")
    invalid_sequence = src["sequence"].isNotNull() & (
        F.col("sequence").isNull() | (F.col("commit_text").isNotNull() & commit_lsn.isNull())
    )
    position_parts = F.when(
        src["connector"] == POSTGRES, F.array(src["sequence"], src["lsn"].cast("string"))
    ).otherwise(F.array(src["file"], src["pos"].cast("string"), src["row"].cast("string")))
    problem = F.coalesce(
        F.when(
            F.col("key").isNull(),
            reason(CONSTRAINT, "primary key: the record has no key (its table needs one)"),
        ),
        key_problem(),
        event_problem("after"),
        value_problem("before", "before image"),
        value_problem("source", "source"),
        truncate_problem(),
        F.when(
            op.isin(UPDATE_OP, DELETE_OP) & F.col("before_text").isNull(),
            reason(
                CONSTRAINT,
                F.concat(
                    F.lit("before image: op '"),
                    op,
                    F.lit(
                        "' has no before image (needs Postgres REPLICA IDENTITY FULL or "
                        "MySQL binlog_row_image=FULL)"
                    ),
                ),
            ),
        ),
        F.when(
            ~F.coalesce(src["connector"].isin(POSTGRES, MYSQL), F.lit(False)),
            reason(
                CONSTRAINT,
                F.concat(
                    F.lit("connector: '"),
                    F.coalesce(src["connector"], F.lit("(none)")),
                    F.lit(f"' is neither {POSTGRES} nor {MYSQL}"),
                ),
            ),
        ),
        F.when(
            ~is_snapshot & invalid_sequence,
            reason(VALUE_DECODE, F.concat(F.lit("invalid sequence: "), src["sequence"])),
        ),
        F.when(
            ~is_snapshot & ~F.forall(position_parts, lambda part: part.isNotNull()),
            reason(CONSTRAINT, "source position: a streaming event lacks its position fields"),
        ),
    )
    op_rank = F.when(op == DELETE_OP, 0).when(op == CREATE_OP, 1).otherwise(2)
    return staged.select(
        "partition",
        "offset",
        "key",
        problem.alias("reason"),
        F.to_json("key_value").alias("key_json"),
        is_snapshot.alias("is_snapshot"),
        src["connector"].alias("connector"),
        F.when(~is_snapshot & (src["connector"] == MYSQL), src["file"]).alias("binlog_file"),
        F.struct(
            F.coalesce(commit_lsn, F.lit(-1)).alias("major"),
            src["lsn"].alias("minor"),
            op_rank.cast("long").alias("tiebreak"),
        ).alias("postgres_position"),
        F.struct(src["pos"].alias("minor"), src["row"].alias("tiebreak")).alias("mysql_position"),
        F.when(F.col("before_text").isNotNull(), F.col("before")).alias("before"),
        F.when(F.col("after_text").isNotNull(), F.col("after")).alias("after"),
    )


def binlog_files(valid: DataFrame, prior: DataFrame) -> tuple[DataFrame, DataFrame]:
    """All binlog files of the touched partitions with their index, and the new ones."""
    known = prior.filter(F.col("entry") == BINLOG_FILE).select(
        "partition", F.col("name").alias("binlog_file"), "file_index"
    )
    first_seen = (
        valid.filter(F.col("binlog_file").isNotNull())
        .groupBy("partition", "binlog_file")
        .agg(F.min("offset").alias("first_offset"))
        .join(known, ["partition", "binlog_file"], "left_anti")
    )
    base = known.groupBy("partition").agg(F.max("file_index").alias("base"))
    by_appearance = Window.partitionBy("partition").orderBy("first_offset")
    fresh = first_seen.join(base, "partition", "left").select(
        "partition",
        "binlog_file",
        (F.coalesce("base", F.lit(-1)) + F.row_number().over(by_appearance)).alias("file_index"),
    )
    return known.union(fresh), fresh


def apply_debezium(batch: EnvelopeBatch) -> EnvelopeResult:
    """The classic DEBEZIUM envelope for one window: the batch's records (no ``time``
    column) at its ``time``; unlike the upsert-style envelopes it takes one window per
    call, as its dedup state moves in Kafka order within a window. Its prior state is the
    DEDUP_STATE shard at the previous time (+ ``diff``)."""
    if batch.time is None or "time" in batch.records.columns:
        raise ValueError(
            "the classic DEBEZIUM envelope applies one window per call: pass its time= "
            "and records without a time column"
        )
    records, time, topic = batch.records, batch.time, batch.topic
    key_schema, value_schema = batch.key_schema, batch.value_schema
    output = output_schema(Envelope.DEBEZIUM, key_schema, value_schema)
    spark = records.sparkSession
    prior_raw = prior_updates(spark, batch.prior_dedup_state, DEDUP_STATE)
    small_prior = consolidate(
        prior_raw.filter(F.col("entry") != SNAPSHOT_KEY), DEDUP_STATE.names, by_time=False
    )
    events = decode_events(records, key_schema, value_schema)
    valid = events.filter(F.col("reason").isNull())
    files, fresh_files = binlog_files(valid, small_prior)
    cursors = small_prior.filter(F.col("entry") == CURSOR).select(
        "partition",
        F.col("streaming").alias("prior_streaming"),
        F.col("hwm").alias("prior_hwm"),
        F.col("last").alias("prior_last"),
    )
    window_keys = valid.filter("is_snapshot").select("partition", F.col("key_json").alias("name"))
    seen = consolidate(
        prior_raw.filter(F.col("entry") == SNAPSHOT_KEY).join(
            F.broadcast(window_keys), ["partition", "name"], "left_semi"
        ),
        DEDUP_STATE.names,
        by_time=False,
    ).select("partition", F.col("name").alias("key_json"), F.lit(True).alias("seen_before"))
    file_position = F.struct(
        F.col("file_index").alias("major"),
        F.col("mysql_position.minor"),
        F.col("mysql_position.tiebreak"),
    )
    position = (
        F.when(F.col("is_snapshot"), F.lit(None))
        .when(F.col("connector") == POSTGRES, F.col("postgres_position"))
        .otherwise(file_position)
    )
    in_order = Window.partitionBy("partition").orderBy("offset")
    earlier = in_order.rowsBetween(Window.unboundedPreceding, -1)
    by_key = Window.partitionBy("partition", "key_json", "is_snapshot").orderBy("offset")
    ordered = (
        valid.join(files, ["partition", "binlog_file"], "left")
        .join(F.broadcast(cursors), "partition", "left")
        .join(seen, ["partition", "key_json"], "left")
        .withColumn("position", position)
        .withColumn("hwm_before", F.greatest("prior_hwm", F.max("position").over(earlier)))
        .withColumn(
            "last_before",
            F.coalesce(F.last("position", ignorenulls=True).over(earlier), "prior_last"),
        )
        .withColumn(
            "streaming_before",
            F.coalesce("prior_streaming", F.lit(False))
            | F.coalesce(F.max(~F.col("is_snapshot")).over(earlier), F.lit(False)),
        )
        .withColumn("key_rank", F.row_number().over(by_key))
    )
    is_streaming = ~F.col("is_snapshot")
    decided = ordered.select(
        "*",
        F.when(
            is_streaming,
            F.col("hwm_before").isNull() | (F.col("position") > F.col("hwm_before")),
        )
        .otherwise(
            ~F.col("streaming_before") & (F.col("key_rank") == 1) & F.col("seen_before").isNull()
        )
        .alias("used"),
    )
    changes = consolidate(stamped(emissions(decided.filter("used"), output), time), output.names)
    errors = consolidate(
        stamped(
            error_rows(events.filter(F.col("reason").isNotNull()), topic).union(
                error_rows(stream_violations(decided), topic)
            ),
            time,
        ),
        ERROR.names,
    )
    dedup = state_updates(decided, cursors, fresh_files, prior_raw)
    return EnvelopeResult(changes, errors, consolidate(stamped(dedup, time), DEDUP_STATE.names))


def emissions(used: DataFrame, output: StructType) -> DataFrame:
    """``-before`` and ``+after`` of every used event."""
    images = [("before", -1), ("after", 1)]
    parts = [
        used.filter(F.col(image).isNotNull()).select(
            *[F.col(image)[name].alias(name) for name in output.names],
            F.lit(diff).cast("long").alias("diff"),
        )
        for image, diff in images
    ]
    return parts[0].union(parts[1])


def stream_violations(decided: DataFrame) -> DataFrame:
    """Events that show the stream broke a constraint: a re-send that stopped short of the
    high-water mark (seen at the next new event), and snapshot events after streaming."""
    gap = (
        ~F.col("is_snapshot")
        & F.col("used")
        & F.col("last_before").isNotNull()
        & (F.col("last_before") < F.col("hwm_before"))
    )
    late_snapshot = F.col("is_snapshot") & F.col("streaming_before")
    detail = F.when(
        gap,
        reason(
            CONSTRAINT,
            F.concat(
                F.lit("contiguous re-sends: a re-send stopped at position "),
                position_text(F.col("last_before")),
                F.lit(" below the high-water mark "),
                position_text(F.col("hwm_before")),
                F.lit(" and the stream went on at "),
                position_text(F.col("position")),
                F.lit("; events in between may have been dropped"),
            ),
        ),
    ).when(
        late_snapshot,
        reason(
            CONSTRAINT,
            "snapshot: a snapshot event after the partition's snapshot ended cannot be "
            "deduplicated (use DEBEZIUM UPSERT for re-snapshots)",
        ),
    )
    return decided.withColumn("reason", detail).filter(F.col("reason").isNotNull())


def state_updates(
    decided: DataFrame, cursors: DataFrame, fresh_files: DataFrame, prior_raw: DataFrame
) -> DataFrame:
    """The dedup state's updates: moved cursors, new binlog files, and snapshot keys (added
    while the snapshot lasts, all dropped when it ends)."""
    per_partition = decided.groupBy("partition").agg(
        F.max("position").alias("window_hwm"),
        F.max_by("position", F.when(F.col("position").isNotNull(), F.col("offset"))).alias(
            "window_last"
        ),
        F.max(~F.col("is_snapshot")).alias("window_streams"),
    )
    moved = per_partition.join(F.broadcast(cursors), "partition", "left").select(
        "partition",
        F.coalesce("prior_streaming", F.lit(False)).alias("was_streaming"),
        (F.coalesce("prior_streaming", F.lit(False)) | F.col("window_streams")).alias("streaming"),
        F.greatest("prior_hwm", "window_hwm").alias("hwm"),
        F.coalesce("window_last", "prior_last").alias("last"),
    )
    old_cursors = cursors.join(moved.select("partition"), "partition", "left_semi")
    still_in_snapshot = moved.filter(~F.col("streaming")).select("partition")
    ended = moved.filter(F.col("streaming") & ~F.col("was_streaming")).select("partition")
    new_keys = decided.filter(F.col("used") & F.col("is_snapshot")).join(
        still_in_snapshot, "partition", "left_semi"
    )
    dropped_keys = consolidate(
        prior_raw.filter(F.col("entry") == SNAPSHOT_KEY).join(
            F.broadcast(ended), "partition", "left_semi"
        ),
        DEDUP_STATE.names,
        by_time=False,
    )
    parts = [
        state_rows(
            negated(old_cursors.withColumn("diff", F.lit(1))),
            CURSOR,
            streaming=F.col("prior_streaming"),
            hwm=F.col("prior_hwm"),
            last=F.col("prior_last"),
        ),
        state_rows(
            moved, CURSOR, streaming=F.col("streaming"), hwm=F.col("hwm"), last=F.col("last")
        ),
        state_rows(
            fresh_files, BINLOG_FILE, name=F.col("binlog_file"), file_index=F.col("file_index")
        ),
        state_rows(new_keys, SNAPSHOT_KEY, name=F.col("key_json")),
        state_rows(negated(dropped_keys), SNAPSHOT_KEY, name=F.col("name")),
    ]
    result = parts[0]
    for part in parts[1:]:
        result = result.union(part)
    return result
