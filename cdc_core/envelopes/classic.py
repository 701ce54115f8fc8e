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
- ``before image``: a ``u`` or ``d`` event carries a before image, and it is the row its
  key holds (a ``c`` or ``r`` event finds its key without a row). Postgres's default
  REPLICA IDENTITY DEFAULT puts only the key columns in the before image: retracting that
  would leave a negative row beside the real one, so the event is an error instead, and
  changes nothing (``verified``);
- ``connector``: the event comes from the postgresql or mysql connector;
- ``source position``: a streaming event carries its position fields (the error names
  the missing ones);
- ``contiguous re-sends``: see above;
- ``snapshot``: no snapshot event after the partition's snapshot ended (a new snapshot
  cannot be deduplicated: use DEBEZIUM UPSERT).
Undecodable keys/values and unknown ops are errors as in DEBEZIUM UPSERT; they are
never retracted. A null value (the tombstone after a delete) carries nothing. A truncate
(op ``t``) is deduplicated like any event; where it is used, every row of the table is
retracted, and the events after it (in Kafka order) apply to the empty table.

The dedup state is a shard of its own (``DEDUP_STATE``), read back at the previous time, so
a restart never re-reads the topic.
"""

from __future__ import annotations

import functools
import operator

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
    TRUNCATE_OP,
    after_key_mismatch,
    event_problem,
    may_hold_truncates,
    stage_events,
)
from cdc_core.envelopes.decode import decode_json
from cdc_core.envelopes.reasons import CONSTRAINT, VALUE_DECODE, error_rows, reason
from cdc_core.envelopes.result import (
    EnvelopeResult,
    column,
    negated,
    prior_updates,
    stamped,
)
from cdc_core.envelopes.upsert import key_problem, value_problem, with_key
from cdc_core.schemas import ERROR
from cdc_core.updates import consolidate
from cdc_core.vocabulary import Envelope

POSTGRES = "postgresql"
MYSQL = "mysql"
CREATE_OP = "c"
READ_OP = "r"
UPDATE_OP = "u"
# What a before image must be, and the connector settings that make it so.
FULL_IMAGES = (
    "a before image must be the whole row: Postgres needs REPLICA IDENTITY FULL "
    "(ALTER TABLE ... REPLICA IDENTITY FULL), MySQL binlog_row_image=FULL"
)
# The source fields each connector's position is made of, and what writes them.
POSITION_FIELDS = {
    POSTGRES: (
        ("sequence", "lsn"),
        "the Debezium PostgreSQL connector writes source.sequence from version 1.5 on, "
        "and source.lsn with every streamed event",
    ),
    MYSQL: (
        ("file", "pos", "row"),
        "the Debezium MySQL connector writes them with every binlog event",
    ),
}

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
    truncates = op == TRUNCATE_OP
    problem = F.coalesce(
        F.when(
            ~truncates & F.col("key").isNull(),
            reason(CONSTRAINT, "primary key: the record has no key (its table needs one)"),
        ),
        F.when(~truncates, key_problem()),
        event_problem("after"),
        value_problem("before", "before image"),
        value_problem("source", "source"),
        F.when(~truncates, after_key_mismatch(key_schema)),
        F.when(
            op.isin(UPDATE_OP, DELETE_OP) & F.col("before_text").isNull(),
            reason(
                CONSTRAINT,
                F.concat(
                    F.lit("before image: op '"), op, F.lit(f"' has no before image; {FULL_IMAGES}")
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
        F.when(~is_snapshot, missing_position(src)),
    )
    op_rank = F.when(op == DELETE_OP, 0).when(op == CREATE_OP, 1).otherwise(2)
    return staged.select(
        "partition",
        "offset",
        "key",
        "key_value",
        "op",
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


def missing_position(src: Column) -> Column:
    """The ``source position`` error of an event whose connector's position fields are
    not all there, naming the missing ones and what writes them; else null."""
    reasons = []
    for connector, (fields, writer) in POSITION_FIELDS.items():
        missing = F.concat_ws(
            ", ", *[F.when(src[name].isNull(), F.lit(f"source.{name}")) for name in fields]
        )
        detail = F.concat(
            F.lit(f"source position: a streaming {connector} event lacks "),
            missing,
            F.lit(f", which the deduplication orders by ({writer})"),
        )
        reasons.append(F.when((src["connector"] == connector) & (missing != ""), detail))
    return reason(CONSTRAINT, F.coalesce(*reasons))


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
    used = decided.filter("used")
    truncates = may_hold_truncates(records)
    updates, refused = verified(used, batch.prior_changes, key_schema, output, truncates)
    changes = consolidate(stamped(updates, time), output.names)
    errors = consolidate(
        stamped(
            error_rows(events.filter(F.col("reason").isNotNull()), topic)
            .union(error_rows(stream_violations(decided), topic))
            .union(error_rows(refused, topic)),
            time,
        ),
        ERROR.names,
    )
    dedup = state_updates(decided, cursors, fresh_files, prior_raw)
    return EnvelopeResult(changes, errors, consolidate(stamped(dedup, time), DEDUP_STATE.names))


# What applying one event to its key's row gives: its position and raw key, the reason it
# is refused (null when it applies), the row it retracts and the row it asserts.
def _verdict(image: StructType) -> StructType:
    return StructType(
        [
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("key", StringType()),
            StructField("reason", StringType()),
            StructField("retracted", image),
            StructField("asserted", image),
        ]
    )


def verified(
    used: DataFrame,
    prior_changes: DataFrame | None,
    key_schema: StructType,
    output: StructType,
    truncates: bool,
) -> tuple[DataFrame, DataFrame]:
    """The window's updates (output columns + ``diff``) and its refused events
    (``partition``, ``offset``, ``key``, ``reason``), from its ``used`` events applied in
    Kafka order to the rows their keys hold (``prior_changes``: the ``changes`` updates
    before the window, None for none).

    Per key, the events fold over the key's row: a ``c``/``r`` applies to a key without a
    row, a ``u``/``d`` when its before image is the row (null-safe, every column), and
    then retracts it and asserts its after image; any other is refused and changes
    nothing. A used truncate empties every key at its position (``truncates``: the window
    may hold one, so the keys no event touches are retracted too), as a mark in each
    touched key's fold."""
    spark = used.sparkSession
    events = used.filter(F.col("op") != TRUNCATE_OP)
    touched = events.select("key_json", "key_value").dropDuplicates(["key_json"])
    prior = prior_updates(spark, prior_changes, output)
    same_key = [prior[name].eqNullSafe(F.col("key_value")[name]) for name in key_schema.names]
    on_touched = functools.reduce(operator.and_, same_key)
    held = consolidate(
        prior.join(F.broadcast(touched), on_touched).select(
            "key_json", *[prior[name] for name in output.names], "diff"
        ),
        ["key_json", *output.names],
        by_time=False,
    )
    rows = F.struct(*[column(name) for name in output.names])
    # A key's row, when it holds exactly one (a key holding none, or a damaged one, has
    # none to retract: its events are refused until it holds one).
    current = held.groupBy("key_json").agg(
        F.when((F.count("*") == 1) & (F.sum("diff") == 1), F.first(rows)).alias("current")
    )
    element = F.struct(
        "partition", "offset", F.lit(False).alias("truncate"), "op", "key", "before", "after"
    )
    steps = events.select("key_json", element.alias("step"))
    empty = F.lit(None).cast(output)
    if truncates:
        marks = used.filter(F.col("op") == TRUNCATE_OP).select(
            "partition",
            "offset",
            F.lit(True).alias("truncate"),
            "op",
            F.lit(None).cast("string").alias("key"),
            empty.alias("before"),
            empty.alias("after"),
        )
        steps = steps.unionByName(
            touched.select("key_json").crossJoin(marks).select(
                "key_json", F.struct(*marks.columns).alias("step")
            )
        )
    folded = (
        steps.groupBy("key_json")
        .agg(F.array_sort(F.collect_list("step")).alias("steps"))
        .join(current, "key_json", "left")
        .select(
            F.explode(
                F.aggregate(
                    "steps",
                    F.struct(
                        F.col("current").alias("row"),
                        F.array().cast(ArrayType(_verdict(output))).alias("verdicts"),
                    ),
                    _apply_step,
                )["verdicts"]
            ).alias("v")
        )
        .select("v.*")
    )
    updates = folded.filter(F.col("retracted").isNotNull()).select(
        "retracted.*", F.lit(-1).cast("long").alias("diff")
    ).unionByName(
        folded.filter(F.col("asserted").isNotNull()).select(
            "asserted.*", F.lit(1).cast("long").alias("diff")
        )
    )
    if truncates:
        emptied = used.filter(F.col("op") == TRUNCATE_OP).select().limit(1)
        untouched = prior.join(F.broadcast(touched), on_touched, "left_anti").crossJoin(emptied)
        emptied_rows = untouched.select(*output.names, "diff")
        updates = updates.unionByName(
            negated(consolidate(emptied_rows, output.names, by_time=False))
        )
    refused = folded.filter(F.col("reason").isNotNull()).select(
        "partition", "offset", "key", "reason"
    )
    return updates, refused


def _apply_step(state: Column, step: Column) -> Column:
    """One event (or truncate mark) applied to a key's fold ``state`` (``row``: what the
    key holds, ``verdicts``: the events so far)."""
    held = state["row"]
    creates = step["op"].isin(CREATE_OP, READ_OP)
    applies = (
        F.when(step["truncate"], F.lit(True))
        .when(creates, held.isNull())
        .otherwise(step["before"].isNotNull() & step["before"].eqNullSafe(held))
    )
    refusal = F.when(
        creates,
        F.concat(
            F.lit("before image: op '"),
            step["op"],
            F.lit("' inserts a row for a key that holds "),
            F.to_json(held),
            F.lit(" already"),
        ),
    ).otherwise(
        F.concat(
            F.lit("before image: op '"),
            step["op"],
            F.lit("' retracts "),
            F.to_json(step["before"]),
            F.lit(" but its key holds "),
            F.coalesce(F.to_json(held), F.lit("no row")),
            F.lit(f"; {FULL_IMAGES}"),
        )
    )
    verdict = F.struct(
        step["partition"].alias("partition"),
        step["offset"].alias("offset"),
        step["key"].alias("key"),
        F.when(~applies, reason(CONSTRAINT, refusal)).alias("reason"),
        F.when(applies, held).alias("retracted"),
        F.when(applies & ~step["truncate"], step["after"]).alias("asserted"),
    )
    return F.struct(
        F.when(applies, F.when(~step["truncate"], step["after"])).otherwise(held).alias("row"),
        F.concat(state["verdicts"], F.array(verdict)).alias("verdicts"),
    )


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
