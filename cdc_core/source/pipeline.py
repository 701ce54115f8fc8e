"""One source, a run of windows at a time: register dumps, bind, reclock, apply the envelope.

A run binds all its windows in one remap commit, reclocks them in one Spark pass and
appends each output shard once, with a progress statement per binding time: a backfill of
a hundred windows costs one pass, not a hundred. The result equals processing the windows
one by one, because every step is defined per binding time.

Every append is idempotent (a shard already past a time ignores it), so a run can be
repeated, or resumed after a crash between two commits, without writing anything twice.
Windows whose bindings exist but whose outputs are missing (a crash between commits) are
processed first, in the same pass (their bindings are durable, so the result is the same).
The classic DEBEZIUM envelope, whose dedup state is read back at the previous time, applies
its windows one after another inside the run.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_core.config import Config, SourceConfig
from cdc_core.envelopes import (
    DEDUP_STATE,
    EnvelopeBatch,
    EnvelopeResult,
    apply_envelope,
)
from cdc_core.envelopes.encodings import PartEncoding, as_json_text
from cdc_core.envelopes.upsert_together import UpsertSource
from cdc_core.frontier import OffsetFrontier, TimeFrontier, iso
from cdc_core.ingest import CanonicalReads, DumpFile, Registry
from cdc_core.ingest.landing_watch import LandingWatch
from cdc_core.ingest.registering import (
    LandedDumps,
    ListedLanding,
    Registered,
    RegisteredAhead,
    new_dump_bytes,
    register_landed,
)
from cdc_core.phases import phase
from cdc_core.reclock import HeldPartition, Windows, frontier_at, held_partitions, reclock_windows
from cdc_core.reclock.reclocking import RangeToReclock, ReclockedRange, ReclockedWindows
from cdc_core.reclock.remap import ImposedBindings, RangeBindings, UnboundWindows
from cdc_core.reclock.transactions import (
    PendingTransactions,
    transaction_registry,
)
from cdc_core.schemas import ERROR, REMAP
from cdc_core.shard import Shard
from cdc_core.shard.leases import unique_reader_id, writing
from cdc_core.shard.together import Batch
from cdc_core.shard.write import Updates
from cdc_core.source.evolution import settle_schema
from cdc_core.source.history import refresh_history
from cdc_core.source.layout import (
    group_root,
    output_tables,
    shard_tables,
    source_registry,
    transaction_binder,
)
from cdc_core.source.planning import (
    prior_outputs,
    run_input_bytes,
)
from cdc_core.source.reader import SourceReader, SourceStatus
from cdc_core.source.registration import Registration, described
from cdc_core.source.resumption import (
    UpstreamCommit,
)
from cdc_core.source.state import (
    published_as_of,
    published_files,
    published_updates,
    refresh_state,
)
from cdc_core.source.states_together import StatePublish
from cdc_core.source.swap import check_not_mid_swap
from cdc_core.source.upserts_together import UpsertRun
from cdc_core.spark import planned_for_input
from cdc_core.storage import LocationLike, located
from cdc_core.vocabulary import Envelope, RecordEncoding


def unregistered_dumps(
    config: Config,
    lake: LocationLike,
    landing: LocationLike,
    watch: LandingWatch,
    pending: Iterable[str],
    looks: Executor,
) -> list[str]:
    """Paths of landed dump files no registry of ``lake`` holds yet: each source's topic,
    and each transaction group's transaction topic (a member's run registers those), as
    ``watch`` lists them (``pending``: paths earlier looks found unregistered).

    The topics are listed in turn (``watch`` keeps where each listing stands); the
    registries are looked up on ``looks``' threads: each look opens its table and reads
    Parquet footers and row groups, mostly outside the interpreter, so a sensor's first
    tick over 200 topics does not wait on each in turn."""
    registries = [source_registry(lake, source) for source in config.sources]
    registries += [
        transaction_registry(group_root(lake, group), group.topic) for group in config.transactions
    ]
    pending = list(pending)
    landed = [watch.landed(landing, registry.topic, pending) for registry in registries]
    looked = looks.map(lambda r, paths: r.unregistered(paths), registries, landed)
    return [path for paths in looked for path in paths]


@dataclass(frozen=True)
class WindowReport:
    """What one window did: figures for logs and materialization metadata."""

    source: str
    start: int
    end: int
    frontier: OffsetFrontier
    minted: bool
    records_in: int
    updates_out: int
    errors_out: int
    pending: PendingTransactions | None = None  # for a member of a transaction group
    # For a run's last window: the partitions its binding holds back, and why.
    held: tuple[HeldPartition, ...] | None = None

    def summary(self) -> str:
        """One line for logs: the window, its binding and its figures."""
        verb = "bound" if self.minted else "reused binding"
        waiting = "" if self.pending is None else f"; {self.pending.describe()}"
        held = "".join(f"; {h.describe()}" for h in self.held or ())
        return (
            f"{self.source} window [{iso(self.start)}, {iso(self.end)}): {verb} {self.frontier}; "
            f"{self.records_in} record(s) in, {self.updates_out} change(s), "
            f"{self.errors_out} error update(s){waiting}{held}"
        )


class SourcePipeline:
    """The shards of one source and the steps that advance them."""

    def __init__(
        self,
        spark: SparkSession,
        config: Config,
        source: SourceConfig,
        lake: LocationLike,
        landing: LocationLike,
        *,
        group_lake: LocationLike | None = None,
        registers: bool = True,
    ) -> None:
        """``group_lake``: the lake of the source's transaction group (``lake`` unless the
        tables are built elsewhere, as a rebuild does, binding with the group in place).
        ``registers``: the run keeps the tables' registrations in the config's catalog in
        step (not for tables built elsewhere: a rebuild registers after its swap)."""
        self.spark = spark
        self.config = config
        self.source = source
        self.root = located(lake) / source.name
        self.landing = located(landing)
        # Before any table is opened: never create tables where a rebuilt source is about
        # to move in, and evolve what a config change reshapes (or refuse the change).
        check_not_mid_swap(located(lake), source.name)
        # A metastore that does not answer fails the run before anything is written.
        self.registration = (
            Registration.of(spark, config, source, self.root) if registers else None
        )
        if self.registration is not None:
            self.registration.reach()
        settle_schema(self.root, source)
        self.registry = source_registry(lake, source)
        self.remap = self._open("remap", REMAP)
        self.reclocked = self._open("reclocked", source.reclocked_schema)
        self.changes = self._open("changes", source.output_schema)
        self.errors = self._open("errors", ERROR)
        self.dedup = (
            self._open("dedup", DEDUP_STATE) if source.envelope == Envelope.DEBEZIUM else None
        )
        self.upstream = UpstreamCommit(self.root / "upstream")
        # The landing zone as ``input_bytes`` listed it, for the next registration.
        self._sized: list[list[DumpFile]] | None = None
        # What the run registered before serving the source: its next registration skips it.
        self._registered_ahead = RegisteredAhead()
        # What a joint binding prepared for the next run: its reads and its bindings.
        self._reads: CanonicalReads | None = None
        self._bound: dict[Windows, RangeBindings] = {}
        self._lease: ExitStack | None = None
        self._reclocked: dict[Windows, tuple[ReclockedWindows, dict[int, int]]] = {}
        # What a joint envelope wrote for the next run: changes and errors per time.
        self._enveloped: dict[Windows, tuple[dict[int, int], dict[int, int]]] = {}
        self.group = transaction_binder(spark, config, group_lake or lake, source.name)
        shards = {name: getattr(self, name) for name in shard_tables(source)}
        self.reader = SourceReader(spark, config, source, self.root, shards, self.group)
        self.encodings = {
            part: PartEncoding(
                source.key_encoding if part == "key" else source.value_encoding,
                tuple(source.key if part == "key" else source.value),
                source.avro_schema(part, config.schema_folder),
            )
            for part in ("key", "value")
        }

    def _open(self, table: str, schema: StructType) -> Shard:
        """The shard ``table`` of the source, created described when missing."""
        return Shard.open(
            self.spark, str(self.root / table), schema, described(self.source, table)
        )

    @classmethod
    def from_config(
        cls, spark: SparkSession, config: Config, source: SourceConfig
    ) -> SourcePipeline:
        """Outside Dagster (CLI, tests): the paths are the config's own."""
        return cls(spark, config, source, config.lake, config.landing)

    @property
    def outputs(self) -> list[Shard]:
        """The shards written from reclocked data (remap excluded), in commit order."""
        return [getattr(self, name) for name in output_tables(self.source)]

    def register_dumps(self, arrival_ms: int, arrived: Mapping[str, int] | None = None) -> int:
        """Register dump files not seen before, stamped with their arrival time: the time
        in ``arrived`` (by path) for a file seen landing earlier, else ``arrival_ms``.

        A member of a transaction group registers its group's dumps too (every member's and
        the transaction topic's), so the group's binding sees them all at the same moment.
        Returns how many of the source's own files were new (none when the run registered
        them with other sources' beforehand: see ``landed_dumps``)."""
        with phase(self.source.name, "register dumps") as figures:
            ahead, self._registered_ahead = self._registered_ahead, RegisteredAhead()
            landed = [e for e in self.landed_dumps(arrival_ms, arrived) if not ahead.covers(e)]
            self._sized = None
            registered: list[Registered] = []
            if landed:
                with planned_for_input(
                    self.spark, new_dump_bytes(landed), self.config.spark.conf
                ):  # a scheduled run's dump is small: its scan (a cold process's first job) too
                    registered = register_landed(self.spark, landed)
            for outcome in registered:
                if outcome.failure is not None:
                    raise outcome.failure
            own = [o.files for e, o in zip(landed, registered, strict=True)
                   if e.registry is self.registry]  # fmt: skip
            figures["files"] = own[0] if own else 0
        return figures["files"]

    def registered_ahead(self, registered: RegisteredAhead) -> None:
        """What the run registered before serving the source (with other sources' dumps):
        its next registration, and whether it has dumps to register first
        (``binding_ahead``), skip the registries it covers."""
        self._registered_ahead = registered

    def landed_dumps(
        self, arrival_ms: int, arrived: Mapping[str, int] | None = None
    ) -> list[LandedDumps]:
        """What ``register_dumps`` registers, per registry: the dumps landed for its topic
        (as ``input_bytes`` listed them, else as listed now), stamped as it stamps them. A
        run serving many sources registers them all together first (``register_landed``)."""
        registries = self._registries()
        listed = self._sized or self._landed(registries)
        return [
            LandedDumps(registry, dumps, arrival_ms, arrived or {})
            for registry, dumps in zip(registries, listed, strict=True)
        ]

    def _registries(self) -> list[Registry]:
        """The registries a run of the source registers into: its own and, for a member
        of a transaction group, every member's and the transaction topic's."""
        registries = [self.registry]
        if self.group is not None:
            registries += [m.registry for m in self.group.members.values()]
            registries.append(self.group.registry)
        # Its own registry once (the group's members include it, at the same place unless
        # its tables are built elsewhere): twice would register its new dumps twice.
        unique: dict[str, Registry] = {}
        for registry in registries:
            unique.setdefault(registry.files_path, registry)
        return list(unique.values())

    def _landed(
        self, registries: Sequence[Registry], listed: ListedLanding | None = None
    ) -> list[list[DumpFile]]:
        """The dump files landed for each registry's topic, as listed now (or as the run
        ``listed`` them for its sources)."""
        listed = listed or ListedLanding()
        return [listed.dump_files(self.landing, r.topic) for r in registries]

    def input_bytes(self, listed: ListedLanding | None = None) -> int:
        """What a run of the source reads, in stored bytes, judged before it registers
        anything: the landed dumps it would register and what a run from the outputs'
        upper reads (``_input_bytes``). Sizes the plan of sources served together; the
        next ``register_dumps`` (or ``landed_dumps``) takes this listing, not one of its own.
        ``listed``: the landing as the run lists it for every source it serves (the
        registries another source counted count nothing here)."""
        listed = listed or ListedLanding()
        self._sized = self._landed(self._registries(), listed)
        lower = self.outputs_upper().time
        prior = 0 if lower is None else self._input_bytes(lower)
        return listed.new_bytes(self.landed_dumps(arrival_ms=0)) + prior

    def outputs_upper(self) -> TimeFrontier:
        """Where all outputs stand: the meet of their uppers ([0] before the first window)."""
        return self.reader.outputs_upper()

    def run_windows(self, windows: Windows) -> list[WindowReport]:
        """Process ``windows`` (a report per window); windows already done write nothing.

        Windows not bound yet before ``windows.start`` are bound to the unchanged frontier
        by the first binding of the run, so their outputs hold nothing.
        """
        held = self.outputs_upper()
        ahead_from = self._written_ahead(windows)
        if ahead_from is not None:  # its outputs were written ahead, with other sources'
            lower = ahead_from
        elif held.time is None or held.time > windows.end:
            return self._with_pending(self._reused(windows))
        else:
            lower = held.time
        done: list[WindowReport] = []
        if lower - 1 > windows.start:
            done = self._reused(Windows(windows.start, lower - 1, windows.width))
        windows = _after_held(windows, lower)
        # Registered writers: a crash leaves staging that gc collects once the lease ran out.
        shards = [self.remap, *self.outputs]
        planned = planned_for_input(self.spark, self._input_bytes(lower), self.config.spark.conf)
        lease_ms = self.config.readers.lease_ms
        lease = self._lease or writing(shards, unique_reader_id("run"), lease_ms,
                                       through=_through(windows))  # fmt: skip
        self._lease = None
        with lease, planned:
            reads, self._reads = self.run_reads(), None
            upper = windows.end + 1
            try:
                ahead = self._reclocked.pop(windows, None)
                if ahead is not None:  # bound and reclocked with other sources' windows
                    run, records_in = ahead
                else:
                    with phase(self.source.name, "bind windows"):
                        run = reclock_windows(
                            self.spark, self.source, self.registry, self.remap, lower, windows,
                            reads, reported=self._reported_files(lower),
                            imposed=self.imposed_bindings, bound=self._bound.pop(windows, None),
                        )  # fmt: skip
                    with phase(self.source.name, "append reclocked") as figures:
                        records_in = self.reclocked.append(  # one row per (partition, offset)
                            run.reclocked.records, lower, upper, consolidated=True
                        ) or {}
                        figures["rows"] = sum(records_in.values())
                        figures["rows_per_time"] = records_in
                # The envelope reads the run's records from the canonical reads the run keeps
                # (equal to what the shard now holds: the data is definite), not by decoding
                # the Parquet just written once more.
                enveloped = self._enveloped.pop(windows, None)
                if enveloped is not None:  # applied with other sources' envelopes
                    updates_out, errors_out = enveloped
                else:
                    updates_out, errors_out = {}, {}
                    for low, high in self._envelope_batches(lower, upper):
                        changes, errors = self._apply_envelope(run.reclocked, low, high)
                        updates_out.update(changes)
                        errors_out.update(errors)
            finally:
                reads.release()
        reports = done + [
            WindowReport(
                source=self.source.name,
                start=end - windows.width,
                end=end,
                frontier=run.bindings.at(end),
                minted=end in run.bindings.minted,
                records_in=records_in.get(end, 0),
                updates_out=updates_out.get(end, 0),
                errors_out=errors_out.get(end, 0),
            )
            for end in windows.ends
        ]
        return self._with_pending(reports)

    def binding_ahead(self, windows: Windows) -> tuple[Windows, UnboundWindows] | None:
        """For a run of ``windows`` served with other sources' runs: the windows it will
        bind and reclock, and what of them the remap has yet to bind, by the source's own
        policy or, for a member of a transaction group, by the group's (None when nothing
        is: the outputs or the remap hold them, or its run has dumps to register first).
        ``bound_ahead`` hands the run what was bound."""
        if self._unregistered():
            return None  # registering first would bind differently: it binds when it runs
        held = self.outputs_upper()
        if held.time is None or held.time > windows.end:
            return None
        windows = _after_held(windows, held.time)
        pending = UnboundWindows.of(self.remap, windows)
        return None if pending is None else (windows, pending)

    def _unregistered(self) -> bool:
        """Whether dumps its run would register are not registered yet (a registration
        of the run's dumps together with other sources' left them to it)."""
        return any(
            entry.registry.unregistered([d.path for d in entry.dumps])
            for entry in self.landed_dumps(arrival_ms=0)
            if not self._registered_ahead.covers(entry)
        )

    def bound_ahead(self, windows: Windows, bindings: RangeBindings) -> None:
        """The bindings of ``windows`` (as ``binding_ahead`` gave them), minted for the
        source's next run together with other sources': the run takes them as its own."""
        self._bound[windows] = bindings

    def range_ahead(self, windows: Windows) -> RangeToReclock:
        """The reclocked range of the source's next run of ``windows`` (as
        ``binding_ahead`` gave them, and bound ahead): what reclocking it reads."""
        lower = self.outputs_upper().time
        assert lower is not None  # ``binding_ahead`` found windows to run
        bindings = self._bound[windows]
        known = bindings if lower == windows.start + 1 else None
        return RangeToReclock.of(
            self.source, self.registry, self.remap, lower, windows.end + 1, known,
            reported=self._reported_files(lower),
        )  # fmt: skip

    def lease_run(self, windows: Windows) -> ExitStack:
        """Register the writer lease of the source's next run of ``windows`` on its tables
        now, for a run whose reclocked records are staged with other sources' before it
        starts; each table's last commit of the run releases it, else the run's end
        (closing the stack releases it sooner)."""
        stack = ExitStack()
        shards = [self.remap, *self.outputs]
        stack.enter_context(writing(shards, unique_reader_id("run"), self.config.readers.lease_ms,
                                    through=_through(windows)))  # fmt: skip
        self._lease = stack
        return stack

    def reclocked_ahead(
        self, windows: Windows, reclocked: ReclockedRange, records_in: dict[int, int]
    ) -> None:
        """The source's part of the reclocked records of its next run of ``windows``,
        appended to its ``reclocked`` table with other sources' (``records_in``: what the
        append committed per time): the run applies its envelope to them."""
        self._reclocked[windows] = (ReclockedWindows(self._bound.pop(windows), reclocked),
                                    records_in)  # fmt: skip

    def upsert_ahead(self, windows: Windows, number: int) -> UpsertRun | None:
        """The source's part of a joint UPSERT (or DEBEZIUM UPSERT) envelope over the
        records of its next run of ``windows``, reclocked ahead, as record ``number`` of
        the joint records (None: its envelope runs on its own; see ``upserts_together``
        for which do not)."""
        source, ahead = self.source, self._reclocked.get(windows)
        joint = UpsertSource(source.topic, source.key_schema, source.value_schema,
                             source.envelope)  # fmt: skip
        plain = (
            joint.joins
            and not source.format.cdcv2
            and not source.include
            and all(e.encoding is RecordEncoding.JSON for e in self.encodings.values())
        )
        if ahead is None or not plain:
            return None
        lower, upper = ahead[0].reclocked.lower, ahead[0].reclocked.upper
        state = str(self.root / "state")
        prior: tuple[str, ...] = ()
        if lower > 0 and self.changes.holds_updates():
            published = published_files(state, lower - 1)
            if published is None:  # its prior contents are the history of changes
                return None
            prior = tuple(f.path for f in published)
        return UpsertRun(
            number, joint, Batch(self.changes, lower, upper),
            Batch(self.errors, lower, upper), state, prior,
            erred=lower > 0 and self.errors.holds_updates(through=lower - 1),
        )  # fmt: skip

    def _written_ahead(self, windows: Windows) -> int | None:
        """Where the run of ``windows`` starts when a joint envelope already wrote its
        outputs (the windows written ahead are the run's last ones); None otherwise."""
        for ahead in self._enveloped:
            if ahead.end == windows.end and ahead.start >= windows.start:
                return self._reclocked[ahead][0].reclocked.lower
        return None

    def enveloped_ahead(
        self, windows: Windows, changes: dict[int, int], errors: dict[int, int]
    ) -> None:
        """What a joint envelope appended for the source's next run of ``windows``: its
        changes and errors per time (the run does not apply its envelope again)."""
        self._enveloped[windows] = (changes, errors)

    def state_ahead(self) -> StatePublish:
        """The source's ``state``, to publish with other sources' once a joint envelope
        wrote its ``changes`` (``publish_together``). Its tables' descriptions are stamped
        first, as ``finish`` stamps them before it publishes, so that the publish stays
        the table's newest commit; ``finish`` then finds ``state`` up to date."""
        if self.registration is not None:
            self.registration.stamp()
        return StatePublish(
            self.changes, str(self.root / "state"), self.source.output_schema,
            described(self.source, "state"),
        )  # fmt: skip

    def run_reads(self) -> CanonicalReads:
        """The dump reads of the source's next run: those a joint binding prepared (holding
        the source's part of its read), else new ones. The run releases them."""
        if self._reads is None:
            self._reads = CanonicalReads(
                self.spark, self.registry, headers=self.source.keeps_headers
            )
        return self._reads

    def _input_bytes(self, lower: int) -> int:
        """What a run from ``lower`` reads, in stored bytes (``planning.run_input_bytes``)."""
        joined = (self.dedup, self.reclocked if self.source.format.cdcv2 else None)
        prior = prior_outputs(self.root / "state", self.changes, joined)
        return run_input_bytes(self.registry, self.remap, lower, prior)

    def planned_by_tables(
        self, *tables: str, after: Mapping[str, int] | None = None
    ) -> AbstractContextManager[bool]:
        """Plan the block's queries by what the source's ``tables`` hold, as its read
        handle plans them (``SourceReader.planned_by_tables``)."""
        return self.reader.planned_by_tables(*tables, after=after)

    @property
    def imposed_bindings(self) -> ImposedBindings | None:
        """For a member of a transaction group, its part of the group's bindings (what
        ``mint_bindings`` copies instead of asking the source's policy)."""
        if self.group is None:
            return None
        return functools.partial(self.group.member_bindings, self.source.name)

    def _with_pending(self, reports: list[WindowReport]) -> list[WindowReport]:
        """``reports`` with the pending transactions of their windows, and the last one
        with the partitions its binding holds back (judged from the registry alone; the
        earlier windows of a backfill are history by now)."""
        pending = self.reader.pending_transactions([r.end for r in reports])
        reports = [dataclasses.replace(r, pending=pending.get(r.end)) for r in reports]
        if reports:
            frontier = reports[-1].frontier
            files = self.registry.files(reaching=frontier.offsets)
            held = held_partitions(self.source, files, frontier, group=self.reader.group_name)
            reports[-1] = dataclasses.replace(reports[-1], held=tuple(held))
        return reports

    def _reported_files(self, lower: int) -> frozenset[str]:
        """Registered files with errors to report whose rows the errors shard holds before
        ``lower``: an earlier run reported them, so this one must not again."""
        paths = [f.path for f in self.registry.live_files() if f.has_errors]
        if not paths or lower <= 0:
            return frozenset()
        reported = (
            self.errors.snapshot(lower - 1)
            .where(F.col("file").isin(paths))
            .select("file")
            .distinct()
            .collect()
        )
        return frozenset(row["file"] for row in reported)

    def _reused(self, windows: Windows) -> list[WindowReport]:
        """Windows the outputs already hold, with their own figures: the counts their
        commits recorded (progress statements: no data read) and their binding (for a
        window retired below the remap's since, the current frontier)."""
        records, changes, errors = (
            _committed_counts(shard, windows.start)
            for shard in (self.reclocked, self.changes, self.errors)
        )
        remap_since, remap_upper = self.remap.refresh().since.time or 0, self.remap.upper.time
        current = self.reader.inspect().frontier
        return [
            WindowReport(
                self.source.name,
                end - windows.width,
                end,
                frontier_at(self.remap, end)
                if remap_since <= end and (remap_upper is None or end < remap_upper)
                else current,
                False,
                records.get(end, 0),
                changes.get(end, 0),
                errors.get(end, 0),
            )
            for end in windows.ends
        ]

    def _envelope_batches(self, lower: int, upper: int) -> list[tuple[int, int]]:
        """The time ranges the envelope is applied to: the whole run, except for the
        classic DEBEZIUM envelope, which needs each window's predecessor committed."""
        if self.source.envelope != Envelope.DEBEZIUM:
            return [(lower, upper)]
        width, first = self.config.window_ms, self.config.start_ms
        ends = [t for t in range(first + width, upper, width) if t >= lower]
        lowers = [lower, *(end + 1 for end in ends[:-1])]
        return list(zip(lowers, [end + 1 for end in ends], strict=True))

    def _apply_envelope(
        self, reclocked: ReclockedRange, lower: int, upper: int
    ) -> tuple[dict[int, int], dict[int, int]]:
        """Apply the envelope to the reclocked records at times ``[lower, upper)`` and
        append its outputs; returns the distinct changes and errors written per time."""
        in_range = (F.col("time") >= lower) & (F.col("time") < upper)
        with phase(self.source.name, "plan envelope") as figures:
            result = self._envelope_result(reclocked.records, lower, upper)
            if result.completeness:  # a CDCv2 stream: how far it is complete, per window
                figures["cdcv2_complete"] = {t: str(f) for t, f in result.completeness.items()}
        errors: Updates = reclocked.errors.filter(in_range).unionByName(result.errors)
        try:
            with phase(self.source.name, "append changes") as figures:
                changes = self.changes.append(  # envelope outputs come consolidated
                    result.changes, lower, upper, consolidated=True
                ) or {}
                figures["rows"] = sum(changes.values())
                figures["rows_per_time"] = changes
            with phase(self.source.name, "append errors") as figures:
                # Most batches have no error, even for a source that once had some: proven
                # so by one job over the witnesses, they cost no write job.
                if proven_empty(reclocked.error_witness, result.error_witness):
                    errors = self.errors.no_updates()
                written_errors = self.errors.append(errors, lower, upper) or {}
                figures["rows"] = sum(written_errors.values())
                figures["rows_per_time"] = written_errors
            if self.dedup is not None and result.dedup_state is not None:
                with phase(self.source.name, "append dedup state"):
                    self.dedup.append(result.dedup_state, lower, upper)
        finally:
            result.release()
        return changes, written_errors

    def _envelope_result(self, records: DataFrame, lower: int, upper: int) -> EnvelopeResult:
        """The envelope's changes, errors and dedup state for the records at times
        ``[lower, upper)`` (lazy frames: computed when appended)."""
        in_range = (F.col("time") >= lower) & (F.col("time") < upper)
        selected = as_json_text(
            records.filter(in_range).drop("diff"), self.encodings["key"], self.encodings["value"]
        )
        classic = self.source.envelope == Envelope.DEBEZIUM
        batch = EnvelopeBatch(
            selected.drop("time") if classic else selected,
            time=upper - 1 if classic else None,
            topic=self.source.topic,
            key_schema=self.source.key_schema,
            value_schema=self.source.value_schema,
            prior_changes=self._prior_changes(lower),
            prior_errors=self._prior(self.errors, lower),
            prior_dedup_state=self._prior(self.dedup, lower),
            format=self.source.format,
            include=self.source.include,
            prior_records=self._prior(self.reclocked, lower) if self.source.format.cdcv2 else None,
        )
        return apply_envelope(self.source.envelope, batch)

    def _prior_changes(self, lower: int) -> DataFrame | None:
        """The contents of ``changes`` before ``lower``: the published ``state`` when it
        holds exactly the snapshot at ``lower - 1`` (the previous run ended by publishing
        it), which stays as large as the keys; else the history of ``changes``."""
        if lower > 0 and self.changes.holds_updates():
            state = str(self.root / "state")
            published = published_updates(self.spark, state, self.source.output_schema, lower - 1)
            if published is not None:
                return published
        return self._prior(self.changes, lower)

    @staticmethod
    def _prior(shard: Shard | None, lower: int) -> DataFrame | None:
        """The shard's updates up to ``lower - 1`` (None before its first window, or when
        the shard holds no update at all: most sources never write an error, and their
        envelopes then spare the joins against an empty prior).

        Unconsolidated on purpose: the envelopes consolidate only the keys a window
        touches, so a window does not pay for consolidating the whole history. Only the
        part already compacted to ``since`` comes as a (small) snapshot.
        """
        if shard is None or lower == 0 or not shard.holds_updates():
            return None
        since = shard.since.time or 0
        prior = shard.snapshot(since)
        if lower - 1 > since:
            prior = prior.unionByName(shard.listen(since, lower - 1))
        return prior

    def finish(self) -> SourceStatus:
        """Publish ``state`` at the newest complete time and report the source's status."""
        read = ("changes", "state") + (("reclocked", "history") if self.source.history else ())
        published = published_as_of(str(self.root / "state"))
        since = {} if published is None else {"changes": published, "reclocked": published}
        with self.planned_by_tables(*read, after=since):
            return self._publish()

    def _publish(self) -> SourceStatus:
        if self.registration is not None:  # before publishing: its commit stays the newest
            with phase(self.source.name, "describe tables") as figures:
                figures["stamped"] = len(self.registration.stamp())
        with phase(self.source.name, "publish state"):
            refresh_state(
                self.changes,
                str(self.root / "state"),
                self.source.output_schema,
                described(self.source, "state"),
            )
        if self.source.history:
            with phase(self.source.name, "publish history"):
                refresh_history(
                    self.changes,
                    self.reclocked,
                    str(self.root / "history"),
                    self.source.output_schema,
                    self.source.key_schema,
                    described(self.source, "history"),
                )
        if self.registration is not None:
            with phase(self.source.name, "register tables") as figures:
                figures["changed"] = len(self.registration.sync())
        with phase(self.source.name, "status") as figures:
            status = self.reader.status()
            figures.update(status.summary())  # what the run's summary prints of it
            return status


def _through(windows: Windows) -> TimeFrontier:
    """The upper a run of ``windows`` takes the source's tables to: the commit that takes
    one there is the run's last on it, and releases the run's writer lease with it."""
    return TimeFrontier.at(windows.end + 1)


def _after_held(windows: Windows, lower: int) -> Windows:
    """The part of ``windows`` a run binds and reclocks when its outputs stand at
    ``lower``: windows the outputs already hold are not bound or read again (their
    bindings may lie below the remap's since, compacted by a retire)."""
    return windows.from_end(lower - 1) if lower - 1 > windows.start else windows


def proven_empty(*witnesses: DataFrame | None) -> bool:
    """Whether the witnesses (frames whose emptiness proves a part of a batch empty) are
    all empty, tested in one job; False when some part has no witness."""
    present = [witness for witness in witnesses if witness is not None]
    if len(present) < len(witnesses):
        return False
    marks = [witness.select(F.lit(True).alias("erring")) for witness in present]
    return functools.reduce(DataFrame.union, marks).isEmpty()


def _committed_counts(shard: Shard, from_time: int) -> dict[int, int]:
    """Distinct updates per time from ``from_time`` on, as the shard's commits recorded
    them (only the commits that reach those times are read)."""
    return {time: count for p in shard.progress(from_time) for time, count in p.counts}
