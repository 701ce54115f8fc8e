"""Transaction-consistent bindings: a group's windows never split a database transaction.

A transaction that writes several tables arrives as records on several topics (each value
names its ``transaction.id``) plus BEGIN/END records on the connector's transaction topic
(END: ``id``, ``data_collections[{data_collection, event_count}]``). The group's binding at
a window end ``W`` is computed for all members at once:

1. each member proposes its frontier by its own policy, as an ungrouped source would;
2. an END record is known at ``W`` when the transaction topic's event-time binding covers
   it (its contiguous prefix whose running maximum timestamp is below ``W``);
3. a transaction is complete when its END is known and, for every member, the distinct
   records carrying its id below the member's frontier number at least the END's
   ``event_count`` of the member's data collection (collections outside the group are
   not read);
4. per transaction-topic partition, ENDs are admitted in offset order while complete: a
   transaction that is not complete holds every later one back;
5. each member partition's frontier is cut at its first record of a transaction not
   admitted (a record without a transaction is held only behind such a record: a
   frontier is a prefix), and steps 3-5 repeat until the frontiers stop moving (a cut can
   make an admitted transaction incomplete again).

The transaction topic's own frontier (where its first END not admitted lies) is kept, so
a transaction admitted once stays admitted: its redelivered records are never held. The
ids of admitted transactions are kept too (``<root>/admitted``, its upper following the
bindings'), so a run reads the transaction topic from that frontier on, never its history.
The bindings also keep an open mark per window end (under OPEN_MARK): below it every
BEGIN and END belongs to an admitted transaction, so the report of waiting transactions
reads the topic from there on (an open transaction's BEGIN may lie below the frontier).

Invariants: every member's remap is the projection of the group's ``bindings`` shard onto
that member, so no member's binding ever splits a transaction; the group's bindings are
minted once, with compare_and_append (one winner; every other run reads them back), and a
member's remap is copied from them. A run killed after some members copied their
bindings finishes the others from the same durable group bindings, so all members agree.
Steps 3-5 run on the driver for every window of a run in one pass (``admission``), over
summaries two Spark jobs gather: one row per transaction and member partition, and the
open ENDs. Only those, per-partition frontiers and per-window figures of waiting
transactions reach the driver; records stay on the executors.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)
from pyspark.sql.window import Window

from cdc_core.calendar import Windows
from cdc_core.envelopes.decode import CONNECT_WRAPPER_FIELDS, unwrap_connect_envelope
from cdc_core.frontier import OffsetFrontier, TimeFrontier, iso
from cdc_core.ingest import CanonicalReads, CanonicalRecords, Registry, starts_column
from cdc_core.ingest.canonical import SOURCE, SourceFiles, read_canonical
from cdc_core.reclock.admission import OPEN_MARK, TRANSACTION_TOPIC, Admission, End, Run
from cdc_core.reclock.remap import (
    FrontierRequest,
    ReclockSource,
    RemapError,
    bind_times,
    binding_updates,
    effective_starts,
    frontier_of,
    propose_frontiers,
)
from cdc_core.shard import Shard
from cdc_core.shard.log import NO_TABLE, LogMark, log_mark
from cdc_core.storage import LocationLike, located
from cdc_core.vocabulary import ReclockPolicy

# A group binding element: member source -> partition -> next offset. The transaction
# topic's own frontier is stored under the member name TRANSACTION_TOPIC.
GROUP_BINDING = StructType(
    [
        StructField("member", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
    ]
)

# The value of a transaction topic record (Debezium's transaction metadata).
# The durable record of admitted transactions: a transaction id per row, at the binding
# time that admitted it; its upper follows the group bindings' (see ``_admitted_through``).
ADMITTED = StructType([StructField("txid", StringType())])

TRANSACTION_EVENT = StructType(
    [
        StructField("status", StringType()),
        StructField("id", StringType()),
        StructField("event_count", LongType()),
        StructField(
            "data_collections",
            ArrayType(
                StructType(
                    [
                        StructField("data_collection", StringType()),
                        StructField("event_count", LongType()),
                    ]
                )
            ),
        ),
    ]
)


def transaction_registry(root: LocationLike, topic: str) -> Registry:
    """Where the group rooted at ``root`` registers its transaction topic's dumps."""
    return Registry(located(root) / "dumps", topic)


# How many overdue transaction ids a report names (the count is always exact).
MAX_OVERDUE = 20


@dataclass(frozen=True)
class PendingTransactions:
    """Transactions announced by a window's end but not admitted by its binding: how
    many, when the oldest was first announced (Kafka timestamp, ms), and the ids of those
    waiting longer than the group's timeout, oldest first."""

    count: int
    oldest_ms: int | None
    overdue: tuple[str, ...]
    overdue_count: int

    def describe(self) -> str:
        """In words: ``2 transaction(s) waiting (oldest announced <time>); 2 overdue: T3, T4``."""
        if not self.count:
            return "no transaction waiting"
        oldest = "" if self.oldest_ms is None else f" (oldest announced {iso(self.oldest_ms)})"
        text = f"{self.count} transaction(s) waiting{oldest}"
        if self.overdue_count:
            more = self.overdue_count - len(self.overdue)
            named = ", ".join(self.overdue) + (f" and {more} more" if more else "")
            text += f"; {self.overdue_count} overdue: {named}"
        return text


class TransactionBindingMismatch(RemapError):
    """A member's remap disagrees with its group's bindings (bound before it joined)."""


@dataclass(frozen=True)
class Member:
    """One source of a transaction group: what binding it needs."""

    name: str
    source: ReclockSource
    registry: Registry
    collection: str
    value_schema: StructType


# The shards of a group, under its folder: its bindings, and the transactions admitted.
GROUP_TABLES = ("bindings", "admitted")


class PendingSeen:
    """What ``TransactionGroupBinder.pending`` found in this process for one group (by
    its root and timeout), per window end (None: not bound), and the marks of the group's
    tables when it looked.

    Invariant: an answer is given again only while every table it was read from stands
    at the mark it had (``log_mark``: a commit, or a table put in another's place, moves
    it); the transaction topic's dumps never change once landed."""

    _groups: dict[tuple[str, int], PendingSeen] = {}
    _groups_lock = threading.Lock()

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._marks: tuple[LogMark | None, ...] = ()
        self._known: dict[int, PendingTransactions | None] = {}

    @classmethod
    def of(cls, root: str, timeout_ms: int) -> PendingSeen:
        """The process's one record of the group at ``root`` with ``timeout_ms``."""
        with cls._groups_lock:
            return cls._groups.setdefault((root, timeout_ms), cls())

    def holding(self, tables: Sequence[str]) -> dict[int, PendingTransactions | None]:
        """The answers that still hold, with ``tables`` (the group's) as they stand now;
        the caller holds ``lock`` and adds what it finds."""
        known: list[LogMark | None] = [NO_TABLE if m is None else m for m in self._marks]
        known = known or [None] * len(tables)
        marks = tuple(log_mark(t, k) for t, k in zip(tables, known, strict=True))
        if marks != self._marks:
            self._marks, self._known = marks, {}
        return self._known


class TransactionGroupBinder:
    """Mints a transaction group's bindings (``<root>/bindings``) and hands each member
    its projection; the transaction topic's dumps are registered in ``<root>/dumps``. A
    transaction waiting longer than ``timeout_ms`` is overdue."""

    def __init__(
        self,
        spark: SparkSession,
        root: LocationLike,
        topic: str,
        members: Sequence[Member],
        timeout_ms: int,
    ) -> None:
        self.spark = spark
        self.topic = topic
        self.timeout_ms = timeout_ms
        self.members = {m.name: m for m in members}
        self.root = located(root)
        self.registry = transaction_registry(root, topic)
        self.bindings = Shard.open(spark, str(self.root / GROUP_TABLES[0]), GROUP_BINDING)
        self.admitted = Shard.open(spark, str(self.root / GROUP_TABLES[1]), ADMITTED)

    def member_bindings(
        self, member: str, previous: OffsetFrontier, bound: int, windows: Windows
    ) -> list[tuple[int, OffsetFrontier]]:
        """The bindings ``member`` copies for its binding times ``[bound, windows.end + 1)``
        from ``previous`` (its remap at ``bound - 1``): the group's, minted first if need
        be. Every window end and every group binding time in the range is included, so the
        member's remap equals the group's projection at every time."""
        upper = windows.end + 1
        self._mint_through(windows)
        base = self._frontiers_at(bound - 1).get(member, OffsetFrontier())
        if base != previous:
            raise TransactionBindingMismatch(
                f"source {member}: remap at {bound - 1} is {previous}, its transaction group "
                f"bound {base}; a source bound before it joined a group needs a new name"
            )
        rows = [
            (p, o, t)
            for m, p, o, t, d in self._updates(upper - 1)
            if m == member and d > 0 and t >= bound
        ]
        times = {t for _, _, t in rows} | {end for end in windows.ends if end >= bound}
        result: list[tuple[int, OffsetFrontier]] = []
        frontier = previous
        for time in sorted(times):
            frontier = frontier.join(OffsetFrontier({p: o for p, o, t in rows if t == time}))
            result.append((time, frontier))
        return result

    def open_mark(self, time: int) -> OffsetFrontier:
        """The transaction topic's open mark at ``time``: every record below it belongs
        to a transaction admitted by then, so nothing asked about ``time`` or later reads
        below it (empty before the group bound ``time``, or minted no mark yet)."""
        return self._frontiers_at(time).get(OPEN_MARK, OffsetFrontier())

    def _mint_through(self, windows: Windows) -> None:
        """Bind the group through ``windows.end`` unless it is bound already; on a lost
        compare_and_append, re-read and go on from where the winner left it."""
        upper = windows.end + 1
        while True:
            bound = self.bindings.refresh().upper.time
            if bound is None or bound >= upper:
                return
            if bound - 1 >= windows.start:
                unbound = windows.from_end(bound - 1)
            elif bound > 0:
                unbound = Windows(bound - 1, windows.end, windows.width)
            else:
                unbound = windows
            previous = self._frontiers_at(bound - 1)
            # Read once for the run's three joins (ENDs, runs, open marks).
            admitted = self._admitted_through(bound, previous).persist()
            try:
                minted, ends = self._constrain(
                    self._propose(previous, unbound), previous, unbound, admitted
                )
                minted = self._with_open_marks(previous, minted, ends, admitted)
            finally:
                admitted.unpersist()
            parts = []
            for name in [*self.members, TRANSACTION_TOPIC, OPEN_MARK]:
                part = binding_updates(
                    previous.get(name, OffsetFrontier()),
                    [(end, frontiers[name]) for end, frontiers in minted],
                )
                member = pa.array([name] * part.num_rows, pa.string())
                parts.append(part.append_column("member", member))
            updates = pa.concat_tables(parts).select([*GROUP_BINDING.names, "time", "diff"])
            if not self.bindings.compare_and_append(
                updates, TimeFrontier.at(bound), TimeFrontier.at(upper)
            ):
                self._record_admitted(bound, upper, minted, ends)
                return

    def _admitted_through(self, bound: int, previous: Mapping[str, OffsetFrontier]) -> DataFrame:
        """The ids of the transactions admitted before ``bound`` (the bindings' upper;
        ``previous``: the group's frontiers at ``bound - 1``). A run that died between its
        bindings commit and its record left the record behind: the ENDs between the
        transaction frontiers of the two uppers are caught up from the topic (ENDs are
        admitted in offset order, so those below the frontier are the admitted ones)."""
        while True:
            recorded = self.admitted.refresh().upper.time or 0
            if recorded >= bound:
                break
            low = self._frontiers_at(recorded - 1).get(TRANSACTION_TOPIC, OffsetFrontier())
            high = previous.get(TRANSACTION_TOPIC, OffsetFrontier())
            records = self._transaction_records(self._transaction_read(low, high))
            txids: list[str] = []
            if records is not None:
                below = F.col("offset") < starts_column(self.spark, high.offsets)
                ends = records.where((F.col("e.status") == "END") & below)
                txids = ends.select("e.id").distinct().toArrow()["id"].to_pylist()
            rows = _admitted_rows([(txid, bound - 1) for txid in txids])
            self.admitted.compare_and_append(
                rows, TimeFrontier.at(recorded), TimeFrontier.at(bound)
            )
        if bound <= 0:
            return self.spark.createDataFrame([], "txid string")
        return self.admitted.snapshot(bound - 1).select("txid")

    def _record_admitted(
        self,
        bound: int,
        upper: int,
        minted: Sequence[tuple[int, Mapping[str, OffsetFrontier]]],
        ends: Sequence[End],
    ) -> None:
        """Record the transactions the bindings just committed for ``[bound, upper)``
        admitted, each at the first window end whose transaction frontier passes its END.
        A lost race leaves it to the run that won (or to the next run's catch-up)."""
        rows = list(_admitted_at(minted, ends).items())
        self.admitted.compare_and_append(
            _admitted_rows(rows), TimeFrontier.at(bound), TimeFrontier.at(upper)
        )

    def _with_open_marks(
        self,
        previous: Mapping[str, OffsetFrontier],
        minted: list[tuple[int, dict[str, OffsetFrontier]]],
        ends: Sequence[End],
        admitted_before: DataFrame,
    ) -> list[tuple[int, dict[str, OffsetFrontier]]]:
        """``minted`` with each window end's open mark (OPEN_MARK): per transaction-topic
        partition, the first BEGIN or END below the end's transaction frontier of a
        transaction not admitted by then, else that frontier. It never moves back: what
        is admitted stays admitted, and the frontier passes only registered records. One
        Spark job reads the topic from the previous mark and gathers one row per open
        transaction and partition."""
        low = previous.get(OPEN_MARK, OffsetFrontier())
        top = minted[-1][1][TRANSACTION_TOPIC]
        records = self._transaction_records(self._transaction_read(low, top))
        firsts: list[tuple[int, str, int]] = []
        if records is not None and top.offsets:
            below = F.col("offset") < starts_column(self.spark, top.offsets)
            announcements = records.where(
                F.col("e.status").isin("BEGIN", "END") & F.col("e.id").isNotNull() & below
            )
            firsts = [
                (row["partition"], row["txid"], row["first"])
                for row in announcements.groupBy("partition", F.col("e.id").alias("txid"))
                .agg(F.min("offset").alias("first"))
                .join(admitted_before, "txid", "left_anti")
                .collect()
            ]
        admitted = _admitted_at(minted, ends)
        marked = []
        for end, frontiers in minted:
            passed = frontiers[TRANSACTION_TOPIC]
            mark = dict(passed.offsets)
            for partition, txid, first in firsts:
                if passed.contains(partition, first) and admitted.get(txid, end + 1) > end:
                    mark[partition] = min(mark[partition], first)
            marked.append((end, {**frontiers, OPEN_MARK: OffsetFrontier(mark)}))
        return marked

    def _updates(self, until: int) -> list[tuple[str, int, int, int, int]]:
        """The group's updates ``(member, partition, offset, time, diff)`` at times
        ``<= until``, read on the driver (tiny metadata, as a remap's)."""
        table = self.bindings.updates_through(until)
        names = (*GROUP_BINDING.names, "time", "diff")
        return list(zip(*(table.column(c).to_pylist() for c in names), strict=True))

    def _frontiers_at(
        self, time: int, updates: Sequence[tuple[str, int, int, int, int]] | None = None
    ) -> dict[str, OffsetFrontier]:
        """Every member's (and the transaction topic's, and the open mark's) group
        frontier at ``time``; ``updates``: the group's updates through ``time`` or later,
        when already read."""
        if time < 0:
            return {}
        live: dict[str, dict[tuple[int, int], int]] = {}
        for m, p, o, t, d in self._updates(time) if updates is None else updates:
            if t > time:
                continue
            counts = live.setdefault(m, {})
            counts[(p, o)] = counts.get((p, o), 0) + d
        return {m: frontier_of(counts, time) for m, counts in live.items()}

    def _propose(
        self, previous: Mapping[str, OffsetFrontier], windows: Windows
    ) -> list[dict[str, OffsetFrontier]]:
        """Per window end, each member's frontier by its own policy."""
        requests = [
            FrontierRequest(m.source, m.registry, previous.get(name, OffsetFrontier()), windows)
            for name, m in self.members.items()
        ]  # every member bound in one job
        answers = propose_frontiers(self.spark, requests).frontiers
        for answer in answers:
            if isinstance(answer, Exception):
                raise answer
        proposed = {
            name: answer for name, answer in zip(self.members, answers, strict=True)
            if not isinstance(answer, Exception)
        }  # fmt: skip
        return [
            {name: frontiers[i] for name, frontiers in proposed.items()}
            for i in range(len(windows.ends))
        ]

    def _transaction_read(
        self, starts: OffsetFrontier, below: OffsetFrontier | None = None
    ) -> CanonicalRecords | None:
        """The transaction topic's canonical read from ``starts`` on (None before any dump
        is registered); with ``below``, only the files with records below it."""
        files = self.registry.files(reaching=starts.offsets)
        if below is not None:
            files = [f for f in files if f.overlaps(starts.offsets, below)]
        if not files:
            return None
        return CanonicalReads(self.spark, self.registry, persist=False).read(files, starts.offsets)

    def _transaction_records(self, read: CanonicalRecords | None) -> DataFrame | None:
        """The transaction topic's records of ``read``, one per offset, with their parsed
        value ``e`` (None without a read)."""
        if read is None:
            return None
        value = unwrap_connect_envelope(read.records, "payload", TRANSACTION_EVENT, "_value")
        return value.select(
            "partition", "offset", "ts", F.from_json("_value", TRANSACTION_EVENT).alias("e")
        )

    def _transaction_events(self, windows: Windows, frontier: OffsetFrontier) -> DataFrame:
        """END records of the transaction topic from the group's transaction ``frontier``
        on, with the window end that first knows them (event time): ``tpartition``,
        ``toffset``, ``txid``, ``known``, ``counts`` (data_collection -> event_count); ENDs
        no window knows are left out. Every record below the frontier was known before
        the first window ends, so the binding from the frontier is the binding from 0."""
        read = self._transaction_read(frontier)
        records = self._transaction_records(read)
        if read is None or records is None:
            return self.spark.createDataFrame(
                [],
                "tpartition int, toffset bigint, txid string, known bigint, "
                "counts map<string,bigint>",
            )
        # Every position binds, damaged lines too: one never holds back the ENDs after it.
        times = bind_times(
            read.positions,
            starts_column(self.spark, frontier.offsets),
            windows,
            ReclockPolicy.EVENT_TIME,
            False,
        )
        return (
            records.where(F.col("e.status") == "END")
            .join(times.where(F.col("time").isNotNull()), ["partition", "offset"])
            .select(
                F.col("partition").alias("tpartition"),
                F.col("offset").alias("toffset"),
                F.col("e.id").alias("txid"),
                F.col("time").alias("known"),
                F.map_from_entries(
                    F.transform(
                        F.coalesce("e.data_collections", F.array()),
                        lambda c: F.struct(c["data_collection"], c["event_count"]),
                    )
                ).alias("counts"),
            )
        )

    def pending(self, ends: Sequence[int]) -> dict[int, PendingTransactions]:
        """Per window end the group has bound: the transactions the transaction topic
        announced (a BEGIN or END before the end) that its binding has not admitted;
        ``overdue`` names (at most MAX_OVERDUE of) those announced more than the group's
        timeout before the end.

        Every member asks it of the same windows (its window report, its transactions
        check): 400 times a window for a group of 200 tables, each a Spark job when a
        transaction is open. The answer depends on the group's tables alone, so the
        process finds it once per group and window while they stay as they were
        (``PendingSeen``)."""
        tables = (self.bindings.path, self.admitted.path, self.registry.files_path,
                  self.registry.retired_path)  # fmt: skip
        seen = PendingSeen.of(str(self.root), self.timeout_ms)
        with seen.lock:  # members asking at once: the first finds it, the others reuse it
            known = seen.holding(tables)
            missing = [end for end in ends if end not in known]
            if missing:
                found = self._pending(missing)
                known.update({end: found.get(end) for end in missing})
            return {end: p for end in ends if (p := known[end]) is not None}

    def _pending(self, ends: Sequence[int]) -> dict[int, PendingTransactions]:
        """``pending`` found anew. The topic is read from the earliest end's open mark
        on: every record of a transaction waiting at an end lies at or above its mark."""
        upper = self.bindings.refresh().upper.time
        ends = [end for end in ends if upper is None or end < upper]
        if not ends:
            return {}
        updates = self._updates(max(ends))
        bound = {end: self._frontiers_at(end, updates) for end in ends}
        low = bound[min(ends)].get(OPEN_MARK, OffsetFrontier())
        records = self._transaction_records(self._transaction_read(low))
        if records is None:
            return {end: PendingTransactions(0, None, (), 0) for end in ends}
        frontiers = self.spark.createDataFrame(
            [(end, p, o) for end, f in bound.items()
             for p, o in f.get(TRANSACTION_TOPIC, OffsetFrontier()).offsets.items()],
            "end bigint, partition int, frontier bigint",
        )  # fmt: skip
        windows = self.spark.createDataFrame([(end,) for end in ends], "end bigint")
        announced = (
            records.where(F.col("e.status").isin("BEGIN", "END"))
            .groupBy(F.col("e.id").alias("txid"))
            .agg(F.min("ts").alias("since"))
        )
        # Admitted by an end: its END lies below the end's frontier, or (an END read
        # below this mark in another partition) the admitted record says so.
        passed = (
            records.where(F.col("e.status") == "END")
            .join(frontiers, "partition")
            .where(F.col("offset") < F.col("frontier"))
            .select("end", F.col("e.id").alias("txid"))
        )
        recorded = (
            self.admitted.updates_until(max(ends))
            .join(announced.select("txid"), "txid", "left_semi")
            .crossJoin(F.broadcast(windows))
            .where(F.col("time") <= F.col("end"))
            .select("end", "txid")
        )
        waiting = (
            announced.crossJoin(F.broadcast(windows))
            .where(F.col("since") < F.col("end"))
            .join(passed.unionByName(recorded), ["end", "txid"], "left_anti")
        )
        late = F.col("since") < F.col("end") - self.timeout_ms
        overdue = F.sort_array(F.collect_list(F.when(late, F.struct("since", "txid"))))
        rows = (
            waiting.groupBy("end")
            .agg(
                F.count("*").alias("n"),
                F.min("since").alias("oldest"),
                F.slice(overdue, 1, MAX_OVERDUE).alias("overdue"),
                F.count(F.when(late, 1)).alias("late"),
            )
            .collect()
        )
        found = {
            row["end"]: PendingTransactions(
                row["n"], row["oldest"], tuple(o["txid"] for o in row["overdue"]), row["late"]
            )
            for row in rows
        }
        return {end: found.get(end, PendingTransactions(0, None, (), 0)) for end in ends}

    def _member_records(
        self, previous: Mapping[str, OffsetFrontier], top: Mapping[str, OffsetFrontier]
    ) -> DataFrame:
        """Records of every member in ``[previous, top)`` that belong to a transaction:
        ``member``, ``partition``, ``offset``, ``txid``; every member's dumps read in one
        scan, whatever the number of members."""
        parts, names, schemas = [], [], []
        for name, m in self.members.items():
            starts = effective_starts(m.source, previous.get(name, OffsetFrontier()))
            files = [f for f in m.registry.files(reaching=starts) if f.overlaps(starts, top[name])]
            if files:
                parts.append(SourceFiles(m.registry.topic, files, starts))
                names.append(name)
                schemas.append(m.value_schema)
        if not parts:
            return self.spark.createDataFrame(
                [], "member string, partition int, offset bigint, txid string"
            )
        records = read_canonical(self.spark, parts).sourced_records
        member = F.element_at(F.array(*[F.lit(n) for n in names]), F.col(SOURCE) + 1)
        # A value is unwrapped from a Kafka Connect envelope unless its schema has the
        # envelope's fields: one plan for each of the two kinds, not one per member.
        kinds: dict[bool, list[int]] = {}
        for k, schema in enumerate(schemas):
            kinds.setdefault(bool(set(CONNECT_WRAPPER_FIELDS) & set(schema.names)), []).append(k)
        frames = []
        for ks in kinds.values():
            mine = records if len(kinds) == 1 else records.where(F.col(SOURCE).isin(ks))
            value = unwrap_connect_envelope(mine, "payload", schemas[ks[0]], "_value")
            frames.append(
                value.select(
                    member.alias("member"),
                    "partition",
                    "offset",
                    F.get_json_object("_value", "$.transaction.id").alias("txid"),
                ).where(F.col("txid").isNotNull())
            )
        return functools.reduce(DataFrame.unionByName, frames)

    def _constrain(
        self,
        proposals: list[dict[str, OffsetFrontier]],
        previous: Mapping[str, OffsetFrontier],
        windows: Windows,
        admitted_before: DataFrame,
    ) -> tuple[list[tuple[int, dict[str, OffsetFrontier]]], list[End]]:
        """Cut each window's proposals so that no transaction is split (module docstring):
        two Spark jobs gather the run's summaries, the fixed point runs on the driver.
        Returns the frontiers per window end and the ENDs the run knows."""
        events = self._transaction_events(
            windows, previous.get(TRANSACTION_TOPIC, OffsetFrontier())
        )
        ends = [
            End(row["tpartition"], row["toffset"], row["txid"], row["known"],
                {name: (row["counts"] or {}).get(m.collection, 0)
                 for name, m in self.members.items()},
                row["again"])
            for row in events.join(admitted_before.withColumn("again", F.lit(True)), "txid", "left")
            .fillna(False, ["again"])
            .collect()
        ]  # fmt: skip
        runs = [
            Run(row["member"], row["partition"], row["first"], row["txid"], row["count"])
            for row in self._runs(proposals, previous, admitted_before).collect()
        ]
        admission = Admission(list(self.members), runs, ends)
        bound = dict(previous)
        minted = []
        for end, proposed in zip(windows.ends, proposals, strict=True):
            bound = admission.admit(bound, proposed, end)
            minted.append((end, bound))
        return minted, ends

    def _runs(
        self,
        proposals: list[dict[str, OffsetFrontier]],
        previous: Mapping[str, OffsetFrontier],
        admitted_before: DataFrame,
    ) -> DataFrame:
        """The members' transactional records of the run, as ``Run`` rows (``member``,
        ``partition``, ``first``, ``txid``, ``count``): records of transactions admitted
        before the run never hold anything back and are left out."""
        intervals = []
        for name in self.members:
            reached = dict(previous.get(name, OffsetFrontier()).offsets)
            for window, proposed in enumerate(proposals):
                for p, o in proposed[name].offsets.items():
                    if o > reached.get(p, 0):
                        intervals.append((name, p, reached.get(p, 0), o, window))
                        reached[p] = o
        covered = F.broadcast(self.spark.createDataFrame(
            intervals, "member string, partition int, _lo bigint, _hi bigint, window int"
        ))  # fmt: skip
        records = (
            self._member_records(previous, proposals[-1])
            .join(admitted_before, "txid", "left_anti")
            .join(covered, ["member", "partition"])
            .where((F.col("offset") >= F.col("_lo")) & (F.col("offset") < F.col("_hi")))
        )
        order = Window.partitionBy("member", "partition").orderBy("offset")
        starts = (
            F.lag("txid").over(order).isNull()
            | (F.lag("txid").over(order) != F.col("txid"))
            | (F.lag("window").over(order) != F.col("window"))
        )
        numbered = records.withColumn("_starts", starts.cast("int")).withColumn(
            "_run", F.sum("_starts").over(order.rowsBetween(Window.unboundedPreceding, 0))
        )
        return numbered.groupBy("member", "partition", "_run", "txid").agg(
            F.min("offset").alias("first"), F.count("*").alias("count")
        )


def _admitted_at(
    minted: Sequence[tuple[int, Mapping[str, OffsetFrontier]]], ends: Sequence[End]
) -> dict[str, int]:
    """The transactions of ``ends`` that ``minted`` admits, each with the first window end
    whose transaction frontier passes its END."""
    admitted: dict[str, int] = {}
    for end, frontiers in minted:
        passed = frontiers[TRANSACTION_TOPIC]
        for e in ends:
            if e.txid not in admitted and passed.contains(e.tpartition, e.toffset):
                admitted[e.txid] = end
    return admitted


def _admitted_rows(rows: Sequence[tuple[str, int]]) -> pa.Table:
    """Updates of the admitted record: ``(txid, time)`` pairs, each with diff 1."""
    return pa.table({
        "txid": pa.array([txid for txid, _ in rows], pa.string()),
        "time": pa.array([time for _, time in rows], pa.int64()),
        "diff": pa.array([1] * len(rows), pa.int64()),
    })  # fmt: skip
