"""Leased capabilities on a shard: who may still read which history, who is still writing.

A **reader** registers a ``since`` (the oldest IntoTime it will read) and a lease. While
its lease is live the shard's since never passes the reader's since (so compaction keeps
every snapshot it may take exact), and no file of a Delta version at or after the one it
pins is garbage-collected (so a read already planned on that version finds its files).
The reader only moves its since (and pin) forward. A **writer** registers with a lease
too; its staging folders carry its id, and gc leaves them alone while its lease is live.

Registrations live in the shard's own Delta log, never in a side file: every change is
one commit that carries the whole registration table in its commit info and points the
app transaction ``reclock.leases`` at itself. The commit is made at the version that was
read, with no blind retry: a compare-and-set with everything else the shard commits
(data, upper, since). On a conflict the change is re-decided on the new state.

Lease time is **log time**. A registration is renewed at the timestamp recorded in the
commit that renewed it and lasts ``lease_ms`` from there; at a version it is live iff that
version's commit timestamp is before its expiry. Expiry is thus judged by comparing
timestamps stored in one log, never by comparing the clocks of the reader and the
collector. A lease whose time ran out stops holding anything as soon as the log moves
past it; ``expire`` also drops it from the table.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from deltalake import DeltaTable
from deltalake.transaction import Transaction

from cdc_core.frontier import TimeFrontier, iso
from cdc_core.shard import delta_io
from cdc_core.shard.delta_io import DataFile
from cdc_core.shard.handle import SINCE
from cdc_core.shard.log import (
    LEASES_APP_ID,
    CommitSummary,
    app_version,
    carried_at,
    commit_at,
    commit_metadata,
    commit_of,
    commit_once,
    log_mark,
    newest_table,
    read_frontier,
    read_to_newest,
)
from cdc_core.storage import files

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from cdc_core.shard import Shard

LEASES_KEY = "reclock.leases"
READER = "reader"
WRITER = "writer"
_HOLDER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


class LeaseUsageError(ValueError):
    """A caller bug: a bad holder id or lease, a since moved backwards or before the
    shard's since, or a holder that is not (or no longer) registered."""


class LeaseExpired(LeaseUsageError):
    """The holder's lease ran out (or it was released): it holds nothing any more and must
    register again, at a since the shard can still serve."""


@dataclass(frozen=True)
class Registration:
    """One holder's lease, as the log records it. ``since`` and ``version`` (the oldest
    Delta version it may read) are a reader's holds; a writer holds its staging only."""

    holder: str
    kind: str
    lease_ms: int
    renewed_version: int  # the commit that registered or last renewed it
    renewed_ms: int  # that commit's log time
    since: int | None = None
    version: int | None = None

    @property
    def expires_ms(self) -> int:
        """Log time (ms) at which the lease runs out unless renewed."""
        return self.renewed_ms + self.lease_ms

    def stored(self) -> dict[str, Any]:
        """The registration as stored in the commit info (holder and kind are its keys)."""
        kept: dict[str, Any] = {"lease_ms": self.lease_ms, "renewed": self.renewed_version}
        if self.kind == READER:
            kept |= {"since": self.since, "version": self.version}
        return kept


@dataclass(frozen=True)
class Leases:
    """The registrations of a shard at one Delta version, judged at that version's log
    time ``log_ms``."""

    version: int
    log_ms: int
    pointer: int | None  # the version of the last lease commit; None before the first
    registrations: dict[str, Registration] = field(default_factory=dict)

    def live(self, kind: str | None = None) -> list[Registration]:
        """Registrations whose lease has not run out at the log's time, of one kind or all."""
        return [
            r
            for r in self.registrations.values()
            if r.expires_ms > self.log_ms and kind in (None, r.kind)
        ]

    def expired(self) -> list[Registration]:
        """Registrations whose lease ran out at the log's time."""
        return [r for r in self.registrations.values() if r.expires_ms <= self.log_ms]

    def hold(self) -> TimeFrontier:
        """The meet of the live readers' sinces: the empty frontier when none holds."""
        held = TimeFrontier.empty()
        for reader in self.live(READER):
            held = held.meet(TimeFrontier.at(reader.since or 0))
        return held

    def oldest_pinned_version(self) -> int | None:
        """The oldest table version a live reader pins (None: no pin)."""
        pins = [r.version for r in self.live(READER) if r.version is not None]
        return min(pins) if pins else None

    def referenced_versions(self) -> set[int]:
        """The commits the registrations are read from: the registration table's and
        each live holder's renewal and pinned version (log cleanup must keep them)."""
        live = self.live()
        versions = {r.renewed_version for r in live}
        versions |= {r.version for r in live if r.version is not None}
        return versions | ({self.pointer} if self.pointer is not None else set())

    def live_writers(self) -> set[str]:
        """Holders of live writer leases (gc keeps their staging)."""
        return {r.holder for r in self.live(WRITER)}


@dataclass(frozen=True)
class ReadCapability:
    """What a registered reader may do: read the shard at times >= ``since``, at Delta
    versions >= ``version``, until ``expires_ms`` (log time) unless renewed."""

    shard_path: str
    reader: str
    since: int
    version: int
    expires_ms: int


def _commit_ms(table: DeltaTable, version: int) -> int:
    """A commit's log timestamp, as its writer recorded it in the commit info; 0 (older
    than any lease) for a commit log cleanup expired: ``trim_log`` keeps every commit a
    live registration refers to, so only expired registrations refer to such a commit."""
    commit = commit_of(table, version)
    return 0 if commit is None else commit.log_ms


def _stored(commit: CommitSummary | None) -> dict[str, dict[str, Any]]:
    """The lease table ``commit`` stored, by kind then holder; empty for a commit log
    cleanup expired (unchanged for longer than any lease)."""
    if commit is None:
        return {}
    stored = commit.info[LEASES_KEY]
    return json.loads(stored) if isinstance(stored, str) else stored


def _registered(commit: CommitSummary | None) -> bool:
    """Whether the lease table ``commit`` stored holds any registration."""
    return any(_stored(commit).get(kind) for kind in (READER, WRITER))


def read_leases(table: DeltaTable) -> Leases:
    """The registrations at the version ``table`` has loaded."""
    version = table.version()
    pointer = app_version(table, LEASES_APP_ID)
    log_ms = _commit_ms(table, version)
    if pointer is None:
        return Leases(version, log_ms, None)
    stored = _stored(commit_of(table, pointer))
    registrations = {
        holder: Registration(
            holder=holder,
            kind=kind,
            lease_ms=entry["lease_ms"],
            renewed_version=entry["renewed"],
            renewed_ms=_commit_ms(table, entry["renewed"]),
            since=entry.get("since"),
            version=entry.get("version"),
        )
        for kind in (READER, WRITER)
        for holder, entry in stored.get(kind, {}).items()
    }
    return Leases(version, log_ms, pointer, registrations)


def check_writer(table: DeltaTable, writer: str) -> None:
    """Fence a writer whose lease ran out: its staging may be collected already, so it
    must not commit (LeaseExpired). Judged at the version the commit is made from: a gc
    that saw the lease expired saw an older or equal version, and a commit from an older
    version than that one conflicts."""
    _live_registration(read_leases(table), writer, WRITER)


def collectable_files(
    table_path: str, table: DeltaTable, live: Sequence[DataFile], retention_ms: int
) -> list[str]:
    """The files under the table's data folder that gc may delete, at the loaded version:
    - a file of the current version: never;
    - a file removed from the table: when no live reader pins a version before its
      removal, and it was removed more than ``retention_ms`` ago (for unregistered
      readers, as Delta's vacuum retention);
    - a file no commit ever added (staging): a registered writer's when its lease is no
      longer live; an unregistered writer's when it was written ``retention_ms`` ago."""
    holds = read_leases(table)
    pinned = holds.oldest_pinned_version()
    writers = holds.live_writers()
    cutoff_ms = int(time.time() * 1000) - retention_ms
    added, removals = delta_io.file_history(table_path, holds.version)
    listed = delta_io.data_file_entries(table_path)
    keep = {f.path for f in live}
    keep |= {r.path for r in removals if (pinned is not None and r.version > pinned)}
    removed_long_ago = {r.path for r in removals if r.removed_ms <= cutoff_ms}
    collectable = []
    for entry in listed:
        path = entry.path
        if path in keep:
            continue
        if path in added:
            if path in removed_long_ago:
                collectable.append(path)
            continue
        writer = delta_io.batch_writer(path)
        if writer is not None:
            if writer not in writers:
                collectable.append(path)
        elif entry.mtime_ms <= cutoff_ms:
            collectable.append(path)
    return collectable


def _check_holder(holder: str) -> None:
    if not isinstance(holder, str) or not _HOLDER_ID.fullmatch(holder):
        raise LeaseUsageError(
            f"holder id {holder!r} must be 1-100 letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )


def _check_lease(lease_ms: int) -> None:
    if not isinstance(lease_ms, int) or lease_ms <= 0:
        raise LeaseUsageError(f"a lease must be a positive number of milliseconds: {lease_ms!r}")


class LeaseBook:
    """Register, renew, move and release the leases of one shard (driver only, no Spark).
    ``shard``: a handle to refresh after each lease commit, and to stage as a writer."""

    def __init__(self, path: str, shard: Shard | None = None) -> None:
        self.path = files.normalize(path)
        self.shard = shard
        self._opened: DeltaTable | None = None

    @property
    def _table(self) -> DeltaTable:
        """The table the book reads and commits through. A shard's book uses the handle's
        own (``_update`` reloads the handle after it moved), so registering a run's writer
        opens no table; any other book opens its table at first use, so a renewer whose
        block ends before its first renewal opens none."""
        if self.shard is not None:
            return self.shard.delta_table
        if self._opened is None:
            self._opened = newest_table(self.path)
        return self._opened

    @classmethod
    def of(cls, shard: Shard) -> LeaseBook:
        """The lease book of an open shard."""
        return cls(shard.path, shard)

    def read(self) -> Leases:
        """The registrations as of the log's latest version."""
        read_to_newest(self._table, self.path)
        return read_leases(self._table)

    # ---- readers ----------------------------------------------------------------------

    def register(self, reader: str, since: int, lease_ms: int) -> ReadCapability:
        """Hold the shard's history from ``since`` on and pin the Delta version this
        commit creates, for ``lease_ms`` of log time. Registering an id that is live
        already is a usage error (two readers must not share a lease)."""
        _check_holder(reader)
        _check_lease(lease_ms)

        def change(leases: Leases, version: int) -> dict[str, Registration]:
            _refuse_live(leases, reader)
            shard_since = _shard_since(self._table)
            if not shard_since.less_equal(since):
                raise LeaseUsageError(
                    f"since {since} is before the shard's since {shard_since}: "
                    "that history is compacted already"
                )
            entry = Registration(reader, READER, lease_ms, version, 0, since, version)
            return {**leases.registrations, reader: entry}

        registration = self._update(change, f"register reader {reader}")[reader]
        return _capability(self.path, registration)

    def downgrade_since(
        self, reader: str, since: int, *, version: int | None = None
    ) -> ReadCapability:
        """Give up reading before ``since`` (and, with ``version``, Delta versions before
        it); both only move forward. The lease is renewed as well."""

        def change(leases: Leases, commit: int) -> dict[str, Registration]:
            current = _live_registration(leases, reader, READER)
            if since < (current.since or 0):
                raise LeaseUsageError(
                    f"reader {reader!r} may only move its since forward: it is "
                    f"{current.since}, not {since}"
                )
            pin = current.version if version is None else version
            if pin is None or pin < (current.version or 0) or pin > leases.version:
                raise LeaseUsageError(
                    f"reader {reader!r} may pin only versions {current.version} .. "
                    f"{leases.version}, not {pin}"
                )
            moved = replace(current, since=since, version=pin, renewed_version=commit)
            return {**leases.registrations, reader: moved}

        registration = self._update(change, f"reader {reader} since -> {since}")[reader]
        return _capability(self.path, registration)

    # ---- writers ----------------------------------------------------------------------

    def register_writer(self, writer: str, lease_ms: int) -> Registration:
        """Register ``writer`` and make the shard handle stage under its id: while the
        lease is live, gc leaves that staging alone; once it ran out, gc collects it."""
        _check_holder(writer)
        _check_lease(lease_ms)

        def change(leases: Leases, version: int) -> dict[str, Registration]:
            _refuse_live(leases, writer)
            entry = Registration(writer, WRITER, lease_ms, version, 0)
            return {**leases.registrations, writer: entry}

        if self.shard is None:
            raise LeaseUsageError("a writer registers through its shard handle: LeaseBook.of")
        registration = self._update(change, f"register writer {writer}")[writer]
        self.shard.writer = writer
        return registration

    # ---- both -------------------------------------------------------------------------

    def heartbeat(self, holder: str, lease_ms: int | None = None) -> Registration:
        """Renew a live lease from this commit's log time (for ``lease_ms``, or as long
        as before). A lease that ran out cannot be renewed: LeaseExpired."""
        if lease_ms is not None:
            _check_lease(lease_ms)

        def change(leases: Leases, commit: int) -> dict[str, Registration]:
            current = _live_registration(leases, holder, None)
            renewed = replace(
                current, renewed_version=commit, lease_ms=lease_ms or current.lease_ms
            )
            return {**leases.registrations, holder: renewed}

        return self._update(change, f"heartbeat {holder}")[holder]

    def release(self, holder: str) -> None:
        """Drop ``holder``'s registration: it holds nothing from this commit on. Releasing
        a holder that is not registered is a no-op (a release may be repeated)."""

        def change(leases: Leases, _commit: int) -> dict[str, Registration] | None:
            if holder not in leases.registrations:
                return None
            return {h: r for h, r in leases.registrations.items() if h != holder}

        self._update(change, f"release {holder}")
        if self.shard is not None and self.shard.writer == holder:
            self.shard.writer = None

    def expire(self) -> list[str]:
        """Drop every registration whose lease ran out by log time; returns their ids.

        The log's newest timestamp is "now". When this machine's clock says a lease may
        have run out since that commit, an empty lease commit first records the current
        time in the log (the clock is only a hint; the decision compares log times)."""
        leases = self.read()
        now_hint = int(time.time() * 1000)
        if any(r.expires_ms <= now_hint for r in leases.live()):
            self._update(lambda state, _commit: dict(state.registrations), "clock")
        dropped: list[str] = []

        def change(state: Leases, _commit: int) -> dict[str, Registration] | None:
            dropped[:] = [r.holder for r in state.expired()]
            if not dropped:
                return None
            return {h: r for h, r in state.registrations.items() if h not in dropped}

        self._update(change, "expire")
        return sorted(dropped)

    # ---- internals --------------------------------------------------------------------

    def _update(
        self,
        change: Callable[[Leases, int], dict[str, Registration] | None],
        detail: str,
    ) -> dict[str, Registration]:
        """Compare-and-set of the registration table: read, decide, commit at the next
        version with no retry; on a conflict re-read and decide again. ``change`` gets the
        state and the version its commit will have; None means nothing to commit.
        A shard's handle is reloaded after, whatever happened: the book moved its table."""
        try:
            return self._decide_and_commit(change, detail)
        finally:
            if self.shard is not None:
                self.shard.refresh()

    def _decide_and_commit(
        self,
        change: Callable[[Leases, int], dict[str, Registration] | None],
        detail: str,
    ) -> dict[str, Registration]:
        """``_update``'s compare-and-set loop: read, decide, commit; after a lost race,
        again on the newer state."""
        while True:
            leases = self.read()
            commit = leases.version + 1
            registrations = change(leases, commit)
            if registrations is None:
                return dict(leases.registrations)
            stored, transactions = _lease_table(registrations.values(), commit)
            metadata = commit_metadata("leases", detail, stored)
            if not commit_once(self._table, self.path, [], transactions, metadata):
                continue  # another commit took that version: decide again on the new state
            return {
                holder: replace(r, renewed_ms=_commit_ms(self._table, r.renewed_version))
                for holder, r in registrations.items()
            }


def _lease_table(
    registrations: Iterable[Registration], commit: int
) -> tuple[dict[str, Any], list[Transaction]]:
    """What the commit at version ``commit`` carries to store ``registrations`` as the
    shard's lease table: its commit info entry, and the app transaction pointing at it."""
    stored: dict[str, dict[str, Any]] = {READER: {}, WRITER: {}}
    for registration in registrations:
        stored[registration.kind][registration.holder] = registration.stored()
    return {LEASES_KEY: stored}, [Transaction(LEASES_APP_ID, commit)]


def released_with_commit(
    table_path: str, table: DeltaTable, writer: str
) -> tuple[dict[str, Any], list[Transaction]]:
    """What a writer's data commit at the version after ``table``'s carries to release
    ``writer`` with it: the lease table as loaded, without ``writer``. The commit is a
    compare-and-set at the loaded version, so no other lease change can slip between."""
    leases = read_leases(table)
    kept = [r for holder, r in leases.registrations.items() if holder != writer]
    return _lease_table(kept, table.version() + 1)


def _shard_since(table: DeltaTable) -> TimeFrontier:
    return read_frontier(table, SINCE)


def _refuse_live(leases: Leases, holder: str) -> None:
    """Two holders must not share one lease: a live id cannot be registered again."""
    current = leases.registrations.get(holder)
    if current is not None and current in leases.live():
        raise LeaseUsageError(f"{current.kind} {holder!r} is registered already")


def _live_registration(leases: Leases, holder: str, kind: str | None) -> Registration:
    current = leases.registrations.get(holder)
    if current is None or current not in leases.live():
        raise LeaseExpired(
            f"{holder!r} holds no live lease on this shard (expired, released or never "
            "registered): register again"
        )
    if kind is not None and current.kind != kind:
        raise LeaseUsageError(f"{holder!r} is a {current.kind}, not a {kind}")
    return current


def _capability(path: str, registration: Registration) -> ReadCapability:
    return ReadCapability(
        path,
        registration.holder,
        registration.since or 0,
        registration.version or 0,
        registration.expires_ms,
    )


@contextmanager
def reading(shard: Shard, reader: str, since: int, lease_ms: int) -> Iterator[LeaseBook]:
    """Hold ``shard`` from ``since`` while the block runs, then release the hold (also on
    failure). A background thread renews the lease every third of it, so a block that
    runs longer than the lease keeps its hold; a renewal that fails is logged, and the
    hold then lasts until the lease runs out."""
    book = LeaseBook.of(shard)
    book.register(reader, since, lease_ms)
    stop = threading.Event()
    # Its own book, without the shard handle: renewing never refreshes the block's handle.
    renewer = threading.Thread(
        target=_renew, args=(LeaseBook(shard.path), reader, lease_ms, stop),
        name=f"lease {reader}", daemon=True,
    )
    renewer.start()
    try:
        yield book
    finally:
        stop.set()
        renewer.join()
        book.release(reader)


def _renew(book: LeaseBook, holder: str, lease_ms: int, stop: threading.Event) -> None:
    """Heartbeat ``holder`` every third of its lease until ``stop`` is set."""
    while not stop.wait(lease_ms / 3000):
        try:
            book.heartbeat(holder)
        except Exception:  # the block goes on; its reads fail loudly if history goes
            _log.exception("renewing the lease of %s on %s failed", holder, book.path)
            return


@contextmanager
def writing(
    shards: Sequence[Shard], writer: str, lease_ms: int, *, through: TimeFrontier | None = None
) -> Iterator[None]:
    """Register ``writer`` on every shard of ``shards`` while the block stages and commits
    to them, then release them (also on failure): its staging is never collected while
    the lease is live, and once a crash leaves it unreleased, it is collected when the
    lease runs out. A block outliving the lease is fenced at its next commit.

    With ``through``, the upper the block takes each shard to, the commit that takes a
    shard there releases the lease with it (``ShardWriter.commit``): the block's last
    commit on the shard, so a release costs no commit of its own. A shard the block did
    not take there is released when it ends, as without. A shard already there is not
    registered at all: no commit of the block can move its upper, so the block stages
    nothing on it (staging always precedes a commit that moves the upper)."""
    registered: list[tuple[Shard, LeaseBook]] = []
    try:
        for shard in shards:
            if through is not None and through <= shard.upper:
                continue
            book = LeaseBook.of(shard)
            book.register_writer(writer, lease_ms)
            shard.releases_at = through
            registered.append((shard, book))
        yield
    finally:
        for shard, book in registered:
            shard.releases_at = None
            if shard.writer == writer:  # not released by a commit of the block
                book.release(writer)


def unique_reader_id(prefix: str) -> str:
    """A reader id no other run shares: ``prefix`` plus a random suffix."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Hold:
    """What one registration keeps alive, for ``reclock readers`` and the readers check:
    ``versions`` and ``bytes`` are the Delta versions and the removed files' bytes gc
    must keep for it; ``age_ms`` is how old (in log time) the oldest history it pins is."""

    table: str
    registration: Registration
    live: bool
    versions: int
    bytes: int
    age_ms: int

    def describe(self) -> str:
        """One line for ``reclock readers``: holder, since, expiry in log time, what it pins."""
        r = self.registration
        since = "-" if r.since is None else iso(r.since)
        state = "live" if self.live else "EXPIRED"
        return (
            f"  {self.table:<10} {r.kind:<6} {r.holder:<28} since {since:<24} "
            f"expires {iso(r.expires_ms)} ({state}); pins {self.versions} version(s), "
            f"{self.bytes} byte(s), {self.age_ms // 1000} s old"
        )


def holds(table_path: str) -> list[Hold]:
    """Every registration of the shard at ``table_path`` and what it keeps (log only).

    Most of the time a shard has none (a run releases its leases as it ends): then its
    newest commit, which carries the lease table's pointer (``log.carried_at``), and the
    commit it points to say so, without opening the table."""
    mark = log_mark(table_path)
    carried = None if mark is None else carried_at(table_path, mark.version)
    if carried is not None:
        pointer = carried.get(LEASES_APP_ID)
        if pointer is None or not _registered(commit_at(table_path, pointer)):
            return []
    table = newest_table(table_path)
    leases = read_leases(table)
    if not leases.registrations:
        return []
    _, removals = delta_io.file_history(table_path, leases.version)
    sizes = {entry.path: entry.size for entry in delta_io.data_file_entries(table_path)}
    on_disk = set(sizes)
    name = posixpath.basename(posixpath.normpath(table_path.rstrip("/")))
    live = leases.live()
    found = []
    for r in sorted(leases.registrations.values(), key=lambda r: (r.kind, r.holder)):
        if r.kind == READER and r.version is not None:
            pinned = [f for f in removals if f.version > r.version and f.path in on_disk]
            versions = leases.version - r.version
            size = sum(f.size for f in pinned)
            age_ms = leases.log_ms - _commit_ms(table, r.version)
        else:
            staged = [p for p in on_disk if delta_io.batch_writer(p) == r.holder]
            versions = 0
            size = sum(sizes[p] for p in staged)
            age_ms = leases.log_ms - r.renewed_ms
        found.append(Hold(name, r, r in live, versions, size, max(age_ms, 0)))
    return found


def holds_under(root: str) -> list[Hold]:
    """The holds on every Delta table directly under ``root`` (a source's folder)."""
    if not files.is_folder(root):
        return []
    tables = sorted(
        files.join(root, name)
        for name in files.list_folders(root)
        if files.is_folder(files.join(root, name, delta_io.LOG_DIR))
    )
    return [hold for table in tables for hold in holds(table)]
