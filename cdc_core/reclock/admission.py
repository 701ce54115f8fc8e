"""Which transactions a group's window admits, and where that cuts its members.

The rule (``transactions`` module docstring) is a fixed point: a cut can make an
admitted transaction incomplete again. It is computed here on the driver, for every
window of a run in one pass, from summaries one Spark job gathers per run:

- a ``Run`` is a maximal sequence of consecutive transactional records of one member
  partition that carry the same transaction id and that the same window's proposal
  first covers. A cut only ever lies at a proposal or at the first record of a held
  transaction, so it never splits a run, and counting runs counts records exactly;
- an ``End`` is an END record of the transaction topic at or above the group's
  transaction frontier, with the window end that first knows it.

Only these summaries reach the driver (one row per transaction and member partition,
not per record).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cdc_core.frontier import OffsetFrontier

# The member name under which a group's transaction topic frontier is kept.
TRANSACTION_TOPIC = ""
# The member name under which a group keeps its transaction topic's open mark: per
# partition, the first BEGIN or END of a transaction not yet admitted (or the transaction
# frontier when none is open). Not an identifier, so no source can take it.
OPEN_MARK = "#open"


@dataclass(frozen=True)
class Run:
    """``count`` consecutive records of transaction ``txid`` in ``member``'s
    ``partition`` from offset ``first`` (records of other transactions never between)."""

    member: str
    partition: int
    first: int
    txid: str
    count: int


@dataclass(frozen=True)
class End:
    """An END record at ``(tpartition, toffset)`` known from window end ``known`` on:
    transaction ``txid`` has ``counts[member]`` records in each member (0 when absent).
    ``admitted_before``: its transaction was admitted before the run (a redelivery),
    so it holds nothing back."""

    tpartition: int
    toffset: int
    txid: str
    known: int
    counts: Mapping[str, int]
    admitted_before: bool


class Admission:
    """The group's frontiers window by window, from one run's summaries."""

    def __init__(self, members: Sequence[str], runs: Sequence[Run], ends: Sequence[End]):
        self.members = list(members)
        self.runs: dict[tuple[str, int], list[Run]] = defaultdict(list)
        for run in sorted(runs, key=lambda r: (r.member, r.partition, r.first)):
            self.runs[(run.member, run.partition)].append(run)
        self.ends = sorted(ends, key=lambda e: (e.tpartition, e.toffset))
        self.admitted: set[str] = {e.txid for e in ends if e.admitted_before}

    def admit(
        self, previous: Mapping[str, OffsetFrontier], proposed: Mapping[str, OffsetFrontier],
        end: int,
    ) -> dict[str, OffsetFrontier]:
        """The frontiers at ``end`` after ``previous`` (the group's at the window before,
        the transaction topic's under TRANSACTION_TOPIC): each member's proposal cut
        until every transaction with a record below the cut is admitted. Call it for
        the run's windows in time order."""
        txn_previous = previous.get(TRANSACTION_TOPIC, OffsetFrontier())
        known = [e for e in self.ends if e.known <= end]
        self.admitted |= {e.txid for e in known if txn_previous.contains(e.tpartition, e.toffset)}
        open_ends = [
            e for e in known
            if not txn_previous.contains(e.tpartition, e.toffset) and e.txid not in self.admitted
        ]  # fmt: skip
        pending = {
            key: [r for r in runs
                  if r.first >= previous.get(key[0], OffsetFrontier())[key[1]]
                  and r.txid not in self.admitted]
            for key, runs in self.runs.items()
        }  # fmt: skip
        cut = {name: proposed[name] for name in self.members}
        while True:
            admitted, first_open = self._complete_in_order(open_ends, pending, cut)
            moved = False
            for (member, partition), runs in pending.items():
                frontier = cut[member]
                held = next(
                    (r.first for r in runs
                     if r.first < frontier[partition] and r.txid not in admitted),
                    None,
                )  # fmt: skip
                if held is not None:
                    cut[member] = _moved(frontier, partition, held)
                    moved = True
            if not moved:
                break
        tops: dict[int, int] = {}
        for e in known:
            tops[e.tpartition] = max(tops.get(e.tpartition, 0), e.toffset + 1)
        txn = txn_previous.join(OffsetFrontier(tops))
        for tpartition, toffset in first_open.items():
            txn = _moved(txn, tpartition, max(toffset, txn_previous[tpartition]))
        return {**cut, TRANSACTION_TOPIC: txn}

    def _complete_in_order(
        self,
        open_ends: Sequence[End],
        pending: Mapping[tuple[str, int], Sequence[Run]],
        cut: Mapping[str, OffsetFrontier],
    ) -> tuple[set[str], dict[int, int]]:
        """The transactions admitted under ``cut`` (complete, and every END before theirs
        in their transaction-topic partition complete too) and, per transaction-topic
        partition, the offset of its first END not admitted."""
        seen: Counter[tuple[str, str]] = Counter()
        for (member, partition), runs in pending.items():
            for run in runs:
                if run.first < cut[member][partition]:
                    seen[(run.txid, member)] += run.count
        admitted: set[str] = set()
        first_open: dict[int, int] = {}
        for e in open_ends:
            complete = all(seen[(e.txid, m)] >= e.counts.get(m, 0) for m in self.members)
            if complete and e.tpartition not in first_open:
                admitted.add(e.txid)
            else:
                first_open.setdefault(e.tpartition, e.toffset)
        return admitted, first_open


def _moved(frontier: OffsetFrontier, partition: int, offset: int) -> OffsetFrontier:
    """``frontier`` with ``partition`` set to ``offset`` (the others unchanged)."""
    return OffsetFrontier({**frontier.offsets, partition: offset})
