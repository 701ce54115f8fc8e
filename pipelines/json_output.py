"""What ``reclock inspect --json``, ``reclock readers --json`` and ``reclock snapshot --json``
print: one JSON document each, in a stable shape for scripts and monitoring.

The shapes are documented (docs/reference/json-output.md) and held by a test; a change
that is not purely additive raises ``VERSION``. Every document names its ``kind`` and
``version``. Times come twice, as ISO-8601 UTC text (``upper``) and as epoch milliseconds
(``upper_ms``); a frontier that is empty (finished: every time complete) is ``null`` in
both. Kafka partitions are object keys, so they are strings (``"0"``), as JSON requires.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cdc_core.frontier import OffsetFrontier, TimeFrontier, iso
from cdc_core.reclock.held import HeldPartition
from cdc_core.reclock.transactions import PendingTransactions
from cdc_core.shard.leases import Hold
from cdc_core.source import SourceStatus
from cdc_core.source.reader import TableStatus
from cdc_core.source.resumption import ResumptionFrontiers

VERSION = 1


def dumps(document: Mapping[str, Any]) -> str:
    """The document as printed: indented JSON, keys in the order built (stable)."""
    return json.dumps(document, indent=2, default=_plain)


def inspection(statuses: Iterable[SourceStatus]) -> dict[str, Any]:
    """``reclock inspect --json``: per source its frontiers, lag, tables and errors."""
    return {"kind": "inspect", "version": VERSION, "sources": [_status(s) for s in statuses]}


def readers(holds_by_source: Mapping[str, Sequence[Hold]]) -> dict[str, Any]:
    """``reclock readers --json``: per source every registered reader and writer of its
    tables, with its expiry (log time) and what it pins."""
    return {
        "kind": "readers",
        "version": VERSION,
        "sources": [
            {"source": source, "holds": [_hold(hold) for hold in holds]}
            for source, holds in holds_by_source.items()
        ],
    }


def snapshot(
    source: str, as_of: int, total: int, rows: Sequence[Mapping[str, Any]], limit: int
) -> dict[str, Any]:
    """``reclock snapshot --json``: the source's rows at ``as_of`` (at most ``limit`` of
    the ``total``; ``truncated`` says whether some were left out)."""
    return {
        "kind": "snapshot",
        "version": VERSION,
        "source": source,
        **_time("as_of", as_of),
        "rows": total,
        "truncated": total > len(rows[:limit]),
        "shown": [dict(row) for row in rows[:limit]],
    }


def written_snapshot(source: str, as_of: int, out: str, fmt: str) -> dict[str, Any]:
    """``reclock snapshot --json --out DIR``: where the rows were written, and how."""
    return {
        "kind": "snapshot",
        "version": VERSION,
        "source": source,
        **_time("as_of", as_of),
        "written_to": out,
        "format": fmt,
    }


def _status(status: SourceStatus) -> dict[str, Any]:
    found = status.inspection
    partitions = sorted(set(found.frontier.partitions) | set(found.end_offsets.partitions))
    return {
        "source": status.source,
        "windows_done": status.windows_done,
        **_frontier("upper", status.upper),
        "caught_up": found.caught_up,
        "remap": {**_frontier("upper", found.remap_upper), **_frontier("since", found.remap_since)},
        "partitions": [
            {
                "partition": p,
                "frontier": found.frontier[p],
                "registered_end": found.end_offsets[p],
                "lag": found.lag.get(p, 0),
            }
            for p in partitions
        ],
        "resumption": _resumption(found.resumption),
        "committed_upstream": None if found.committed is None else _resumption(found.committed),
        "held": [_held(held) for held in found.held],
        "damaged_files": [{"path": path, "problem": problem} for path, problem in found.damaged],
        "tables": {name: _table(table) for name, table in status.tables.items()},
        "current_errors": status.current_errors,
        "transactions": None if status.pending is None else _pending(status.pending),
    }


def _table(table: TableStatus) -> dict[str, Any]:
    return {
        "path": table.path,
        "version": table.version,
        "rows": table.rows,
        **_time("upper", table.upper),
        **_time("since", table.since),
        "columns": [field.name for field in table.schema.fields],
    }


def _resumption(frontiers: ResumptionFrontiers) -> dict[str, Any]:
    return {**_frontier("time", frontiers.timestamp), "offsets": _offsets(frontiers.offsets)}


def _held(held: HeldPartition) -> dict[str, Any]:
    return {
        "partition": held.partition,
        "waits_at": held.waits_at,
        "registered_end": held.registered_end,
        **_time("waiting_since", held.waiting_since_ms),
        "reason": held.reason,
    }


def _pending(pending: PendingTransactions) -> dict[str, Any]:
    return {
        "waiting": pending.count,
        **_time("oldest_announced", pending.oldest_ms),
        "overdue": list(pending.overdue),
        "overdue_count": pending.overdue_count,
    }


def _hold(hold: Hold) -> dict[str, Any]:
    registration = hold.registration
    return {
        "table": hold.table,
        "kind": registration.kind,
        "holder": registration.holder,
        **_time("since", registration.since),
        **_time("expires", registration.expires_ms),
        "live": hold.live,
        "pinned_versions": hold.versions,
        "pinned_bytes": hold.bytes,
        "age_ms": hold.age_ms,
    }


def _offsets(frontier: OffsetFrontier) -> dict[str, int]:
    return {str(partition): offset for partition, offset in frontier.offsets.items()}


def _frontier(name: str, frontier: TimeFrontier) -> dict[str, Any]:
    return _time(name, frontier.time)


def _time(name: str, ms: int | None) -> dict[str, Any]:
    return {name: None if ms is None else iso(ms), f"{name}_ms": ms}


def _plain(value: object) -> object:
    """A row value JSON cannot hold as it is: times as ISO-8601 text, bytes as base64,
    decimals as text (exact)."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
