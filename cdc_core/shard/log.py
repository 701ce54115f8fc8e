"""The Delta log as a compare-and-set register: the one way reclock commits to a table.

Invariant: every commit is attempted once, at the version the caller's handle read
(``max_commit_retries=0``: never a blind retry), and carries a unique commit id. When the
call fails the log is re-read, and the commit counts as done iff its id is in a newer
version; so each attempt ends definite: committed, conflicted (another commit took the
version, and the caller decides again on the new state) or not written. Only a log that
cannot even be re-read leaves the outcome unknown, and the error says so.

Frontiers (a shard's upper and since, a table's published time) are Delta app-transaction
versions, so they move in the same commit as the data they describe.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pyarrow as pa
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import delta_io
from cdc_core.shard.delta_io import check_table_features
from cdc_core.storage import (
    StorageFailure,
    delta_options,
    files,
    from_spark_path,
    is_remote,
    store_failure,
)
from cdc_core.storage.failures import on_store

# Commit metadata keys (Delta commitInfo): what a commit did, the id that lets a writer
# recognise its own commit after an ambiguous failure, and the CDCv2 progress statement.
OPERATION_KEY = "reclock.operation"
COMMIT_ID_KEY = "reclock.commit"
PROGRESS_KEY = "reclock.progress"
USER_METADATA_KEY = "userMetadata"

# The empty frontier ("finished") is its own app id, so no magic time stands for it.
EMPTY_SUFFIX = ".empty"

# The app ids reclock keeps on its tables: a shard's upper and since, its lease table's
# commit, the time ``state`` was published as of, the upstream commit a rebuild resumes
# from. Every commit reclock makes carries each one's version forward and says so under
# ``CARRIES_KEY``, so the newest commit alone answers them all (``app_version``).
UPPER = "reclock.upper"
SINCE = "reclock.since"
LEASES_APP_ID = "reclock.leases"
STATE_AS_OF = "reclock.state_as_of"
UPSTREAM_COMMIT = "upstream-commit"
KEPT_APP_IDS = tuple(
    app_id + suffix
    for app_id in (UPPER, SINCE, LEASES_APP_ID, STATE_AS_OF, UPSTREAM_COMMIT)
    for suffix in ("", EMPTY_SUFFIX)
)
CARRIES_KEY = "reclock.carries"
CARRIES = "every kept app transaction"

LOCATION_FAILURES = (DeltaError, OSError, PySparkException, Py4JError)

# Opening a table reads its newest checkpoint and every commit after it, and a run opens
# each of its tables several times a window. delta-rs checkpoints after the commit that
# reaches the interval; its default of 100 lets a table of one-minute windows replay up
# to 99 commits (a GetObject each) at every open, so reclock's tables checkpoint every 10.
CHECKPOINT_INTERVAL = {"delta.checkpointInterval": "10"}


class ShardStorageError(RuntimeError):
    """The storage location failed. ``definitely_not_written`` says whether the write is
    known not to have happened (safe to retry blindly) or is indeterminate."""

    def __init__(self, message: str, *, definitely_not_written: bool) -> None:
        super().__init__(message)
        self.definitely_not_written = definitely_not_written


class ShardStoreFailure(ShardStorageError, StorageFailure):
    """A ShardStorageError whose cause is the object store (down, throttling past the
    retries, refusing): named like every StorageFailure (operation, bucket and key), and
    caught where a shard cleans up after a failed storage step."""

    def __init__(self, failure: StorageFailure, *, definitely_not_written: bool) -> None:
        StorageFailure.__init__(self, failure.operation, failure.location, failure.cause)
        self.definitely_not_written = definitely_not_written


def storage_error(action: str, failure: BaseException, *, definitely_not_written: bool
                  ) -> ShardStorageError:  # fmt: skip
    """The error of a failed ``action`` on a shard's location: a ShardStoreFailure when
    the object store failed, else a ShardStorageError quoting ``failure``."""
    named = store_failure(failure, action)
    if named is None:
        return ShardStorageError(
            f"{action} failed: {failure}", definitely_not_written=definitely_not_written
        )
    return ShardStoreFailure(named, definitely_not_written=definitely_not_written)


@dataclass(frozen=True)
class TableDescription:
    """What a table says of itself in its Delta log, from its creation: a description and
    properties (which delta-spark's ``DESCRIBE TABLE EXTENDED`` shows, by path or by name)."""

    text: str
    properties: Mapping[str, str]


@contextmanager
def location_failure(action: str) -> Iterator[None]:
    """Turn a failure of the storage location during ``action``, which commits nothing,
    into a ShardStorageError that says the write definitely did not happen."""
    try:
        yield
    except LOCATION_FAILURES as failure:
        raise storage_error(action, failure, definitely_not_written=True) from failure


def commit_metadata(
    operation: str, detail: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Commit info: machine-readable keys, a fresh commit id, and ``userMetadata``, the
    column in which delta-spark's DESCRIBE HISTORY shows what each reclock commit did."""
    return {
        OPERATION_KEY: operation,
        COMMIT_ID_KEY: uuid.uuid4().hex,
        USER_METADATA_KEY: f"reclock {operation}: {detail}",
        **(extra or {}),
    }


def frontier_transactions(app_id: str, frontier: TimeFrontier) -> list[Transaction]:
    """The app transaction that stores ``frontier`` under ``app_id``."""
    if frontier.time is None:  # empty: finished
        return [Transaction(app_id + EMPTY_SUFFIX, 1)]
    return [Transaction(app_id, frontier.time)]


def read_frontier(table: DeltaTable, app_id: str) -> TimeFrontier:
    """The frontier stored under ``app_id`` at the table's loaded version ([0] if none)."""
    return _frontier(lambda asked: app_version(table, asked), app_id)


def frontier_at(location: str, version: int, app_id: str) -> TimeFrontier:
    """The frontier stored under ``app_id`` at commit ``version`` of the table at
    ``location`` ([0] if none), from that commit alone when it carries it."""
    return _frontier(lambda asked: app_version_at(location, version, asked), app_id)


def _frontier(version_of: Callable[[str], int | None], app_id: str) -> TimeFrontier:
    """The frontier stored under ``app_id``, as ``version_of`` reads app ids."""
    if version_of(app_id + EMPTY_SUFFIX):
        return TimeFrontier.empty()
    return TimeFrontier.at(version_of(app_id) or 0)


def app_version_at(location: str, version: int, app_id: str) -> int | None:
    """``app_version`` at commit ``version`` of the table at ``location`` (a version a
    look at its log found, ``log_mark``): one read of that commit file when it carries
    the kept app ids, else the table opened at that version."""
    carried = carried_at(location, version) if app_id in KEPT_APP_IDS else None
    if carried is not None:
        return carried.get(app_id)
    table = existing_table(location, version)
    return None if table is None else app_version(table, app_id)


def app_version(table: DeltaTable, app_id: str) -> int | None:
    """The version of ``app_id``'s app transaction at the table's loaded version (None
    when it has none).

    Why: delta-rs answers ``transaction_version`` by replaying the log from its newest
    checkpoint, a GetObject per commit file on an object store, for every app id asked,
    and a shard's frontiers ask four. A commit reclock makes carries the version of every
    app id in ``KEPT_APP_IDS`` (``commit_once``), so one read of the loaded version's
    commit file answers them all, once per table and version. A commit that does not say
    it carries them (another writer's, or one reclock made before it carried them) leaves
    the question to delta-rs. Invariant: the answer is what delta-rs would give."""
    if app_id not in KEPT_APP_IDS:
        return table.transaction_version(app_id)
    commit = commit_of(table, table.version())
    carried = None if commit is None else commit.carried
    if carried is None:
        return table.transaction_version(app_id)
    return carried.get(app_id)


@dataclass(frozen=True)
class CommitSummary:
    """What reclock reads of one commit of a log: its commit info (log time, operation,
    lease table) and the versions of the app transactions it holds."""

    info: Mapping[str, Any]
    transactions: Mapping[str, int]

    @property
    def carried(self) -> Mapping[str, int] | None:
        """The app transactions, when the commit says it carries every kept one (else
        None: only delta-rs's replay of the log knows them)."""
        return self.transactions if self.info.get(CARRIES_KEY) == CARRIES else None

    @property
    def log_ms(self) -> int:
        """The commit's log timestamp, as its writer recorded it."""
        if "timestamp" not in self.info:
            raise ValueError("a commit without a commitInfo timestamp")
        return int(self.info["timestamp"])


def commit_at(location: str, version: int) -> CommitSummary | None:
    """The commit ``version`` of the table at ``location``, read from its file (one
    GetObject on an object store); None when log cleanup removed it."""
    try:
        actions = delta_io.commit_actions(files.normalize(location), version)
    except FileNotFoundError:
        return None
    info: Mapping[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    return CommitSummary(info, {a["txn"]["appId"]: a["txn"]["version"] for a in actions
                                if "txn" in a})  # fmt: skip


def carried_at(location: str, version: int) -> Mapping[str, int] | None:
    """The app-transaction versions the commit ``version`` of the table at ``location``
    carries, when it says it carries every kept one (else None: ask delta-rs). One read of
    one commit file; a commit the log's cleanup removed carries nothing."""
    commit = commit_at(location, version)
    return None if commit is None else commit.carried


def commit_of(table: DeltaTable, version: int) -> CommitSummary | None:
    """``commit_at`` of ``table``'s log, read once per table object and version.

    Why: a lease decision reads the commit the lease table is stored in, the newest one
    (its log time) and each holder's renewal, and frontiers read the newest one: mostly
    the same few commits, again after each commit. A commit of a log never changes; a
    table object reads one log (a table swapped in at its location is another object's
    to read), so what it read holds for the object's life. Only the newest
    ``_COMMITS_KEPT`` versions are kept per object: a handle lives through a long run."""
    with _COMMITS_LOCK:
        kept = _COMMITS.get(id(table))
        if kept is not None and version in kept:
            return kept[version]
    commit = commit_at(from_spark_path(table.table_uri), version)  # a URI like Spark's
    if commit is None:
        return None  # not kept: a version asked before it was written may come
    with _COMMITS_LOCK:
        if id(table) not in _COMMITS:  # forgotten with the table object
            weakref.finalize(table, _forget, id(table))
        kept = _COMMITS.setdefault(id(table), {})
        kept[version] = commit
        for old in sorted(kept)[:-_COMMITS_KEPT]:
            del kept[old]
    return commit


def _forget(table_id: int) -> None:
    """Drop what ``commit_of`` kept of a table object that is gone."""
    with _COMMITS_LOCK:
        _COMMITS.pop(table_id, None)


# What ``commit_of`` read, per live table object (by id, as a DeltaTable is unhashable):
# by version, the commit read.
_COMMITS: dict[int, dict[int, CommitSummary]] = {}
_COMMITS_KEPT = 16
_COMMITS_LOCK = threading.RLock()  # a finalizer may run while it is held


def carried_forward(table: DeltaTable, app_transactions: Sequence[Transaction]
                    ) -> list[Transaction]:  # fmt: skip
    """``app_transactions`` and, for every other kept app id with a version at the
    table's loaded version, that version again: what a commit on it carries."""
    own = {transaction.app_id for transaction in app_transactions}
    kept = ((app_id, app_version(table, app_id)) for app_id in KEPT_APP_IDS if app_id not in own)
    return [*app_transactions, *(Transaction(a, v) for a, v in kept if v is not None)]


def commit_batches_once(
    table: DeltaTable,
    path: str,
    actions: Sequence[AddAction | RemoveAction],
    app_transactions: Sequence[Transaction],
    metadata: Mapping[str, Any],
    batches: Sequence[str],
) -> bool:
    """``commit_once`` for actions that add the staged ``batches``: when the commit lost
    the race or is definitely not written, the staged files are deleted, so a table
    never keeps files no version references (an unknown outcome keeps them for gc)."""
    try:
        committed = commit_once(table, path, actions, app_transactions, metadata)
    except ShardStorageError as failure:
        if failure.definitely_not_written:
            delta_io.delete_batches(path, list(batches))
        raise
    if not committed:
        delta_io.delete_batches(path, list(batches))
    return committed


def commit_once(
    table: DeltaTable,
    path: str,
    actions: Sequence[AddAction | RemoveAction],
    app_transactions: Sequence[Transaction],
    metadata: Mapping[str, Any],
) -> bool:
    """Attempt one commit at ``table``'s loaded version; ``metadata`` comes from
    ``commit_metadata``. Returns True when it is in the log, False when another commit
    took the version (``table`` then holds the newer state); raises ShardStorageError
    when it is definitely not written, or when the log cannot be re-read to tell.
    ``table`` is up to date with the log afterwards in every outcome but the last."""
    read_version = table.version()
    try:
        transactions = carried_forward(table, app_transactions)
    except (*LOCATION_FAILURES, StorageFailure) as failure:
        raise storage_error(
            f"reading the log of {path}", failure, definitely_not_written=True
        ) from failure
    properties = CommitProperties(
        max_commit_retries=0,
        app_transactions=transactions,
        custom_metadata={**metadata, CARRIES_KEY: CARRIES},
    )
    try:
        table.create_write_transaction(
            list(actions), "append", table.schema(), commit_properties=properties
        )
    except LOCATION_FAILURES as failure:
        if _landed(table, path, read_version, metadata[COMMIT_ID_KEY], failure):
            return True
        if table.version() == read_version:
            raise storage_error(
                f"commit to {path}", failure, definitely_not_written=True
            ) from failure
        return False
    try:
        read_to_newest(table, path)
    except LOCATION_FAILURES as failure:
        raise storage_error(
            f"re-reading the log of {path} after a commit", failure, definitely_not_written=False
        ) from failure
    return True


def _landed(
    table: DeltaTable, path: str, read_version: int, commit_id: str, failure: Exception
) -> bool:
    """After a failed commit call: re-read the log and report whether the commit is in
    it anyway (e.g. it landed and a later step failed)."""
    try:
        read_to_newest(table, path)
        newer = table.version() - read_version
        history = table.history(limit=newer) if newer > 0 else []
    except LOCATION_FAILURES as unreadable:
        raise storage_error(
            f"re-reading the log of {path} after a failed commit ({failure}), which may or "
            "may not have happened,", unreadable, definitely_not_written=False,
        ) from unreadable  # fmt: skip
    return any(entry.get(COMMIT_ID_KEY) == commit_id for entry in history)


# A commit file of a Delta log: ``_delta_log/<version, 20 digits>.json``.
COMMIT_FILE = re.compile(r"^(\d{20})\.json$")


@dataclass(frozen=True)
class LogMark:
    """Where a Delta table's log stands: its newest version, and the size and modification
    time of that version's commit file.

    Equal marks mean the same table at the same version: a commit adds a newer file, and a
    table put in the place of another (a rebuild's swap, a table deleted and created
    anew) has commit files written at other moments. So what was read from a table at a
    mark still holds while the mark does, and a look that finds its mark unchanged need
    not open the table (which reads its whole log, or checkpoint and commits since)."""

    version: int
    size: int
    mtime_ms: int


# The mark of a look that found no table: given to ``log_mark`` as the known mark, the
# next look lists the log folder once (a first look also reads ``_last_checkpoint``).
NO_TABLE = LogMark(-1, 0, 0)


def log_mark(location: str, known: LogMark | None = None) -> LogMark | None:
    """The mark of the table at ``location`` now (None where there is none). Reads no
    commit and creates nothing. With the ``known`` mark of an earlier look: on local disk
    two lookups find whether it still holds (its commit file as it was, no next one),
    whatever the log's length; on an object store one listing from its version on (the
    commits before it cost no request). Known to hold no table (``NO_TABLE``): one
    listing of the log folder, empty until a table is made there (a log cleanup leaves
    the newest checkpoint's commit and every later one). Without one, the listing starts
    at the newest checkpoint (``_last_checkpoint``, read once), so a log of a year of
    windows costs what a day's does; only a log without a checkpoint is listed whole,
    and it is short."""
    log = files.join(files.normalize(location), "_delta_log")
    if known == NO_TABLE:
        return _newest_from(log, 0)
    if known is not None:
        if not is_remote(location) and _still_at(log, known):
            return known
        mark = _newest_from(log, known.version)
        if mark is not None:
            return mark  # else the known commit is gone: another table, looked at afresh
    checkpoint = _checkpointed(log)
    mark = _newest_from(log, checkpoint)
    return mark if mark is not None or not checkpoint else _newest_from(log, 0)


def _newest_from(log: str, first: int) -> LogMark | None:
    """The mark of the newest commit in the log folder ``log`` at or after version
    ``first`` (None when it holds none), listed from there."""
    after = files.join(log, f"{first - 1:020d}.json") if first else None
    listed = files.list_after(log, after, recursive=False)
    commits = [(version, entry) for entry in listed
               if (found := COMMIT_FILE.match(posixpath.basename(entry.path)))
               and (version := int(found[1])) >= first]  # fmt: skip
    if not commits:
        return None
    version, entry = max(commits, key=lambda commit: commit[0])
    return LogMark(version, entry.size, entry.mtime_ms)


def _checkpointed(log: str) -> int:
    """The version of the newest checkpoint of the log folder ``log`` (0 without one):
    every commit from there on is still in the log."""
    try:
        text = files.read_bytes(files.join(log, "_last_checkpoint"))
    except FileNotFoundError:
        return 0
    return int(json.loads(text)["version"])


def _still_at(log: str, known: LogMark) -> bool:
    """Whether the local log folder ``log`` still ends at ``known``: its commit file as
    it was, and no newer one."""
    try:
        commit = os.stat(posixpath.join(log, f"{known.version:020d}.json"))
    except OSError:
        return False
    if (commit.st_size, commit.st_mtime_ns // 1_000_000) != (known.size, known.mtime_ms):
        return False
    return not os.path.exists(posixpath.join(log, f"{known.version + 1:020d}.json"))


def existing_table(location: str, version: int | None = None) -> DeltaTable | None:
    """The Delta table at ``location`` (at ``version``, else its latest), opened with the
    storage settings; None where there is none. Creates nothing: a look changes nothing."""
    options = delta_options(location)
    with on_store(f"opening {location}", location):
        if not DeltaTable.is_deltatable(location, storage_options=options):
            return None
        if version is not None:
            return DeltaTable(location, version=version, storage_options=options)
        return newest_table(location)


T = TypeVar("T")


class KeptByMark(Generic[T]):
    """What this process read of each table, kept with its log's mark (``log_mark``) and
    read again only once the mark moved: a look costs two stats on local disk, one
    listing on an object store, where reading again opens the table or its newest
    commit. A location found holding no table is kept as ``NO_TABLE`` (looked at again
    by one listing). Thread-safe; two threads that miss at once both read, and either is
    kept."""

    def __init__(self, read: Callable[[str, LogMark], T | None]) -> None:
        self._read = read
        self._kept: dict[str, tuple[LogMark, T | None]] = {}
        self._lock = threading.Lock()

    def get(self, location: str) -> T | None:
        """What ``read`` gives for the table at ``location`` at the mark this call finds
        (None where there is no table, or where ``read`` gives None)."""
        with self._lock:
            kept = self._kept.get(location)
        mark = log_mark(location, kept[0] if kept else None)
        if mark is None:
            with self._lock:
                self._kept[location] = (NO_TABLE, None)
            return None
        if kept is not None and kept[0] == mark:
            return kept[1]
        value = self._read(location, mark)
        if value is not None:
            with self._lock:
                self._kept[location] = (mark, value)
        return value


# A run looks at a table it does not write (a source's published ``state``) at several
# of its steps: to plan, to size a step, to tell a publish from another writer's, to
# report. The table is opened once per mark and shared: read it, never move or commit
# through it.
_TABLES_TO_READ: KeptByMark[DeltaTable] = KeptByMark(
    lambda location, mark: existing_table(location, mark.version)
)


def table_to_read(location: str) -> DeltaTable | None:
    """The Delta table at ``location`` at its newest commit, to read and never to move or
    commit through (the object is shared, ``KeptByMark``); None where there is none."""
    return _TABLES_TO_READ.get(location)


def newest_table(location: str) -> DeltaTable:
    """The Delta table at ``location`` at its log's newest commit, that commit confirmed
    the newest (``confirmed_newest``); a failure of the store is a StorageFailure."""
    with on_store(f"opening {location}", location):
        table = DeltaTable(location, storage_options=delta_options(location))
        return confirmed_newest(table, location)


def read_to_newest(table: DeltaTable, location: str) -> DeltaTable:
    """``table`` read on to its log's newest commit, that commit confirmed the newest
    (``confirmed_newest``).

    Most calls find the table where it was (a handle refreshed again, a table re-read
    right after its own commit): then the commit after its version is absent, and one
    lookup of that file says so (a stat, or a HEAD on an object store) where reading the
    log on lists it. Commits are numbered without gaps, and a log cleanup (``trim_log``)
    removes only commits before a checkpoint, older than a reader lease, that no live
    registration refers to: for a handle read on within a lease of its load, or whose
    holder is registered, a missing next commit means no newer one."""
    log = files.join(files.normalize(location), "_delta_log")
    with on_store(f"reading the log of {location}", log):
        if not files.is_object(files.join(log, f"{table.version() + 1:020d}.json")):
            return table
        table.update_incremental()
    return confirmed_newest(table, location)


def confirmed_newest(table: DeltaTable, location: str) -> DeltaTable:
    """``table``, loaded at the newest commit a listing of its log found, once that
    commit is confirmed the newest; a StorageFailure naming the next commit when the
    listing ended early.

    Why: delta-rs finds a table's newest commit by listing its log. A store, or a proxy
    in front of it, that ends a listing early without saying so would leave the table at
    an older version, and a run would decide on it: bind windows without dumps the
    registry holds, or judge a commit of its own not written. So, as
    ``files.list_after`` does for reclock's own listings, the listing's end is confirmed:
    on an object store the commit after the loaded version must be absent (one HEAD).
    While it is there the log is read again (a listing cut once may be whole the next
    time); a read that ends at the same commit is the store failing, and is named.
    Invariant: the version returned was the log's newest at the last lookup."""
    if not is_remote(location):
        return table
    log = files.join(files.normalize(location), "_delta_log")
    while files.is_object(following := files.join(log, f"{table.version() + 1:020d}.json")):
        reached = table.version()
        table.update_incremental()
        if table.version() == reached:
            raise StorageFailure(
                f"listing the log of {location}",
                following,
                f"the listing ended at commit {reached} without saying so; the commit "
                "after it exists",
            )
    return table


def open_or_create(
    location: str,
    schema: DeltaSchema,
    *,
    detail: str,
    configuration: Mapping[str, str] | None = None,
    app_transactions: Sequence[Transaction] = (),
    described: TableDescription | None = None,
) -> DeltaTable:
    """Load the table at ``location``, creating it (with ``app_transactions`` in its first
    commit, ``described`` as its description and properties) when missing; a concurrent
    creator winning the race is fine. A table using a Delta feature reclock cannot honour
    is refused before anything is read."""
    options = delta_options(location)
    with location_failure(f"opening {location}"):
        if not DeltaTable.is_deltatable(location, storage_options=options):
            properties = CommitProperties(
                app_transactions=list(app_transactions),
                custom_metadata={**commit_metadata("create", detail), CARRIES_KEY: CARRIES},
            )
            try:
                DeltaTable.create(
                    location,
                    schema,
                    mode="error",
                    description=described.text if described else None,
                    storage_options=options,
                    configuration={**CHECKPOINT_INTERVAL,
                                   **(described.properties if described else {}),
                                   **(configuration or {})},  # fmt: skip
                    commit_properties=properties,
                    raise_if_key_not_exists=False,  # reclock's own properties
                )
            except DeltaError:
                if not DeltaTable.is_deltatable(location, storage_options=options):
                    raise
        table = newest_table(location)
    check_table_features(table, location)
    return table


def add_missing_columns(table: DeltaTable, path: str, wanted: DeltaSchema) -> list[str]:
    """Add the columns of ``wanted`` that ``table`` lacks, at its end (a metadata-only
    commit; rows written before read null there); returns their names. A failed commit is
    judged on the re-read log: done if the columns are there (a concurrent writer added
    them), else a ShardStorageError."""
    present = set(table.schema().to_arrow().names)
    missing = [field for field in wanted.fields if field.name not in present]
    names = [field.name for field in missing]
    if not missing:
        return []
    properties = CommitProperties(
        max_commit_retries=0, custom_metadata=commit_metadata("add columns", ", ".join(names))
    )
    try:
        table.alter.add_columns(missing, commit_properties=properties)
    except LOCATION_FAILURES as failure:
        with location_failure(f"re-reading the log of {path}"):
            read_to_newest(table, path)
        if set(names) - set(table.schema().to_arrow().names):
            raise ShardStorageError(
                f"adding columns {names} to {path} failed: {failure}", definitely_not_written=True
            ) from failure
    return names


def append_rows(path: str, rows: pa.Table, operation: str, detail: str) -> DeltaTable:
    """Append driver-held ``rows`` (a few rows of metadata, never data) to the plain Delta
    table at ``path``, creating it with their schema; columns the table lacks (it was
    written by an older reclock) are added first. Appends commute, so a conflict is
    simply attempted again on the new version; every attempt's outcome is definite.
    Returns the table, loaded at the version of the append or later."""
    schema = DeltaSchema.from_arrow(rows.schema)
    table = open_or_create(path, schema, detail="empty")
    add_missing_columns(table, path, schema)
    batch_id = uuid.uuid4().hex
    written = delta_io.write_arrow(path, rows, batch_id)
    add = [delta_io.add_action(written, data_change=True)]
    _commit_batch(table, path, add, [batch_id], commit_metadata(operation, detail), again=True)
    return table


def rewrite_table(
    table: DeltaTable,
    path: str,
    parts: Mapping[str, pa.Table],
    row_group_rows: int | None,
    detail: str,
    replaced: Sequence[delta_io.DataFile] | None = None,
) -> bool:
    """Replace the ``replaced`` files of ``table`` (the Delta table at ``path``, as read;
    by default every file) by one file per part (its batch folder name -> its rows, in row
    groups of ``row_group_rows``): driver-held metadata rows laid out anew, the rows
    themselves the same (no data change). Attempted once, at the version read: False
    when another commit came first (nothing changed, the files written are deleted; the
    next merge or maintenance tries again)."""
    if replaced is None:
        replaced = delta_io.live_files(table)
    written = [
        delta_io.write_arrow(path, rows, batch_id, row_group_rows)
        for batch_id, rows in parts.items()
        if rows.num_rows
    ]
    actions: list[AddAction | RemoveAction] = [
        *(delta_io.remove_action(f) for f in replaced),
        *(delta_io.add_action(f, data_change=False) for f in written),
    ]
    detail = f"{len(replaced)} file(s) -> {len(written)}, {detail}"
    return _commit_batch(
        table, path, actions, list(parts), commit_metadata("compact", detail), again=False
    )


def merge_files(
    table: DeltaTable,
    path: str,
    chosen: Sequence[delta_io.DataFile],
    schema: pa.Schema,
    batch_id: str,
    *,
    sort_by: str,
    row_group_rows: int | None = None,
) -> bool:
    """Merge the ``chosen`` small files of a table the driver appends metadata to (what
    ``delta_io.files_to_merge`` picks) into one file of ``schema``, sorted by
    ``sort_by``. The rows stay the same, so no snapshot changes. One attempt at
    ``table``'s version (see ``rewrite_table``): False when another commit came first."""
    with location_failure(f"reading the small files of {path}"):
        rows = delta_io.read_arrow(path, chosen, schema).sort_by(sort_by)
    detail = f"{len(chosen)} small file(s) merged, sorted by {sort_by}"
    return rewrite_table(table, path, {batch_id: rows}, row_group_rows, detail, chosen)


def _commit_batch(
    table: DeltaTable,
    path: str,
    actions: Sequence[AddAction | RemoveAction],
    batch_ids: Sequence[str],
    metadata: Mapping[str, Any],
    *,
    again: bool,
) -> bool:
    """Commit ``actions``, which add the files written in ``batch_ids``; ``again``: on a
    conflict attempt again on the new version (the commit commutes with any other).
    Whenever the commit is definitely not in the log, the batches' files are deleted."""
    try:
        while not commit_once(table, path, actions, [], metadata):
            if not again:
                delta_io.delete_batches(path, batch_ids)
                return False
    except ShardStorageError as failure:
        if failure.definitely_not_written:
            delta_io.delete_batches(path, batch_ids)
        raise
    return True
